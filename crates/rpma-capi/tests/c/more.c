/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * RPMA_BACKEND=mock or verbs, one thread: a shared RQ with its own receive CQ on the server side, a
 * shared completion channel with a receive CQ on the client side, rpma_mr_advise, and the
 * bad arguments of these functions.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librpma.h>

#include "check.h"

#define RET(expr, code)                                                                  \
	do {                                                                             \
		int ret_ = (expr);                                                       \
		if (ret_ != (code)) {                                                    \
			fprintf(stderr, "%s:%d: %s = %d (%s), expected %s\n", __FILE__,  \
				__LINE__, #expr, ret_, rpma_err_2str(ret_), #code);      \
			exit(1);                                                         \
		}                                                                        \
	} while (0)
#define OK(expr) RET(expr, 0)
#define INVAL(expr) RET(expr, RPMA_E_INVAL)

#define ADDR test_addr()
#define PORT test_port("7314")
#define SENTINEL ((void *)0x5a5a)

static struct ibv_wc poll_one(struct rpma_cq *cq)
{
	struct ibv_wc wc;
	int ret;
	while ((ret = rpma_cq_get_wc(cq, 1, &wc, NULL)) == RPMA_E_NO_COMPLETION)
		;
	OK(ret);
	return wc;
}

int main(void)
{
	struct ibv_context *ctx = NULL;
	struct rpma_peer *peer = NULL;
	OK(rpma_utils_get_ibv_context(ADDR, RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));
	OK(rpma_peer_new(ctx, &peer));
	static char buf[4096];
	struct rpma_mr_local *mr = NULL;
	OK(rpma_mr_reg(peer, buf, sizeof(buf),
		RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV | RPMA_MR_USAGE_WRITE_DST, &mr));

	/* rpma_mr_advise */
	INVAL(rpma_mr_advise(NULL, 0, 8, 0, 0));
	INVAL(rpma_mr_advise(mr, 0, 8, 3, 0));
	INVAL(rpma_mr_advise(mr, 4090, 8, 0, 0));
	/* advice reaches the provider, which refuses bad flags where it advises at all: the mock
	 * does; a device without on-demand paging (rxe) takes no advice (RPMA_E_NOSUPP) */
	const char *device = getenv("RPMA_TEST_DEVICE");
	int advised = rpma_mr_advise(mr, 0, 4096, 1, 1);
	EXPECT(advised == 0 || (device && *device && advised == RPMA_E_NOSUPP));
	RET(rpma_mr_advise(mr, 0, 8, 0, 0x80), advised == 0 ? RPMA_E_INVAL : RPMA_E_NOSUPP);

	/* shared-RQ configuration */
	struct rpma_srq_cfg *scfg = SENTINEL;
	uint32_t v = 0;
	INVAL(rpma_srq_cfg_new(NULL));
	OK(rpma_srq_cfg_new(&scfg));
	OK(rpma_srq_cfg_get_rq_size(scfg, &v));
	EXPECT(v == 20);
	OK(rpma_srq_cfg_get_rcq_size(scfg, &v));
	EXPECT(v == 20);
	INVAL(rpma_srq_cfg_set_rq_size(NULL, 8));
	INVAL(rpma_srq_cfg_get_rq_size(NULL, &v));
	INVAL(rpma_srq_cfg_get_rq_size(scfg, NULL));
	INVAL(rpma_srq_cfg_set_rcq_size(NULL, 8));
	INVAL(rpma_srq_cfg_get_rcq_size(NULL, &v));
	INVAL(rpma_srq_cfg_get_rcq_size(scfg, NULL));
	OK(rpma_srq_cfg_set_rq_size(scfg, 8));
	OK(rpma_srq_cfg_set_rcq_size(scfg, 8));
	OK(rpma_srq_cfg_get_rq_size(scfg, &v));
	EXPECT(v == 8);

	/* shared RQs: one without a receive CQ, one with */
	struct rpma_srq *srq = SENTINEL, *bare = NULL;
	struct rpma_cq *srcq = SENTINEL;
	INVAL(rpma_srq_new(NULL, scfg, &srq));
	INVAL(rpma_srq_new(peer, scfg, NULL));
	EXPECT(srq == SENTINEL);
	OK(rpma_srq_cfg_set_rcq_size(scfg, 0));
	OK(rpma_srq_new(peer, scfg, &bare));
	OK(rpma_srq_get_rcq(bare, &srcq));
	EXPECT(srcq == NULL);
	OK(rpma_srq_delete(&bare));
	EXPECT(bare == NULL);
	OK(rpma_srq_delete(&bare));
	INVAL(rpma_srq_delete(NULL));
	OK(rpma_srq_new(peer, NULL, &srq)); /* defaults: with a receive CQ */
	INVAL(rpma_srq_get_rcq(NULL, &srcq));
	INVAL(rpma_srq_get_rcq(srq, NULL));
	OK(rpma_srq_get_rcq(srq, &srcq));
	EXPECT(srcq != NULL);
	INVAL(rpma_srq_cfg_delete(NULL));
	OK(rpma_srq_cfg_delete(&scfg));
	EXPECT(scfg == NULL);
	OK(rpma_srq_cfg_delete(&scfg));
	INVAL(rpma_srq_recv(NULL, mr, 0, 8, NULL));
	INVAL(rpma_srq_recv(srq, NULL, 0, 8, NULL));
	INVAL(rpma_srq_recv(srq, NULL, 8, 0, NULL));

	/* the server's configuration uses the shared RQ */
	struct rpma_conn_cfg *server_cfg = NULL;
	struct rpma_srq *got_srq = SENTINEL;
	OK(rpma_conn_cfg_new(&server_cfg));
	OK(rpma_conn_cfg_get_srq(server_cfg, &got_srq));
	EXPECT(got_srq == NULL);
	INVAL(rpma_conn_cfg_set_srq(NULL, srq));
	INVAL(rpma_conn_cfg_set_srq(server_cfg, NULL));
	INVAL(rpma_conn_cfg_get_srq(NULL, &got_srq));
	INVAL(rpma_conn_cfg_get_srq(server_cfg, NULL));
	OK(rpma_conn_cfg_set_srq(server_cfg, srq));
	OK(rpma_conn_cfg_get_srq(server_cfg, &got_srq));
	EXPECT(got_srq == srq);

	/* the client's: a receive CQ on a shared completion channel */
	struct rpma_conn_cfg *client_cfg = NULL;
	OK(rpma_conn_cfg_new(&client_cfg));
	OK(rpma_conn_cfg_set_rcq_size(client_cfg, 4));
	OK(rpma_conn_cfg_set_compl_channel(client_cfg, true));

	struct rpma_ep *ep = NULL;
	struct rpma_conn_req *req = NULL, *sreq = NULL;
	struct rpma_conn *conn = NULL, *sconn = NULL;
	OK(rpma_ep_listen(peer, ADDR, PORT, &ep));
	OK(rpma_conn_req_new(peer, ADDR, PORT, client_cfg, &req));
	OK(rpma_conn_req_connect(&req, NULL, &conn));
	OK(rpma_ep_next_conn_req(ep, server_cfg, &sreq));
	OK(rpma_conn_req_connect(&sreq, NULL, &sconn));
	OK(rpma_conn_cfg_delete(&server_cfg));
	OK(rpma_conn_cfg_delete(&client_cfg));
	enum rpma_conn_event ev;
	OK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_ESTABLISHED);
	OK(rpma_conn_next_event(sconn, &ev));
	EXPECT(ev == RPMA_CONN_ESTABLISHED);

	/* the server's receives come from the shared RQ and complete on its receive CQ */
	struct rpma_cq *cq = NULL, *rcq = SENTINEL, *scq = NULL;
	OK(rpma_conn_get_rcq(sconn, &rcq));
	EXPECT(rcq == NULL);
	OK(rpma_conn_get_cq(sconn, &scq));
	OK(rpma_srq_recv(srq, mr, 0, 16, (void *)31));
	strcpy(buf + 100, "to srq");
	OK(rpma_send(conn, mr, 100, 7, RPMA_F_COMPLETION_ON_ERROR, NULL));
	struct ibv_wc wc = poll_one(srcq);
	EXPECT(wc.status == IBV_WC_SUCCESS && wc.wr_id == 31 && wc.opcode == IBV_WC_RECV &&
		wc.byte_len == 7);
	EXPECT(strcmp(buf, "to srq") == 0);

	/* the client's receive CQ shares the completion channel with its main CQ */
	int fd = -1, cq_fd = -2;
	OK(rpma_conn_get_compl_fd(conn, &fd));
	OK(rpma_conn_get_cq(conn, &cq));
	OK(rpma_conn_get_rcq(conn, &rcq));
	EXPECT(cq != NULL && rcq != NULL && rcq != cq);
	OK(rpma_cq_get_fd(rcq, &cq_fd));
	EXPECT(fd == cq_fd);
	RET(rpma_cq_wait(cq), RPMA_E_SHARED_CHANNEL);
	RET(rpma_cq_wait(rcq), RPMA_E_SHARED_CHANNEL);
	OK(rpma_recv(conn, mr, 200, 16, (void *)32));
	strcpy(buf + 300, "to rcq");
	OK(rpma_send(sconn, mr, 300, 7, RPMA_F_COMPLETION_ALWAYS, (void *)33));
	wc = poll_one(scq);
	EXPECT(wc.status == IBV_WC_SUCCESS && wc.wr_id == 33);
	struct rpma_cq *which = NULL;
	bool is_rcq = false;
	OK(rpma_conn_wait(conn, 0, &which, &is_rcq));
	EXPECT(which == rcq && is_rcq);
	wc = poll_one(rcq);
	EXPECT(wc.status == IBV_WC_SUCCESS && wc.wr_id == 32 && wc.opcode == IBV_WC_RECV);
	EXPECT(strcmp(buf + 200, "to rcq") == 0);

	OK(rpma_conn_disconnect(conn));
	OK(rpma_conn_next_event(sconn, &ev));
	OK(rpma_conn_disconnect(sconn));
	OK(rpma_conn_next_event(conn, &ev));
	OK(rpma_conn_delete(&conn));
	OK(rpma_conn_delete(&sconn));
	OK(rpma_ep_shutdown(&ep));
	OK(rpma_srq_delete(&srq));
	EXPECT(srq == NULL);
	OK(rpma_mr_dereg(&mr));
	OK(rpma_peer_delete(&peer));
	printf("more: OK\n");
	return 0;
}
