/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * RPMA_BACKEND=mock with RPMA_MOCK_FAULT=ibv_req_notify_cq:N (tests/c_programs.rs runs it for
 * N = 1, 2, ...): a client with a receive CQ on a shared completion channel waits for a message
 * with rpma_conn_wait. The N-th arming of a CQ fails: while connecting (each CQ is armed when it
 * is made) the failing call returns RPMA_E_PROVIDER and the program exits with status 3 after
 * freeing what it made; when it is rpma_conn_wait's re-arming of the CQ whose event it took,
 * rpma_conn_wait returns RPMA_E_PROVIDER and sets *cq to NULL, as librpma does ("fault: wait
 * PROVIDER"); when no arming fails, the wait succeeds ("fault: wait OK").
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librpma.h>

#include "check.h"

#define ADDR test_addr()
#define PORT test_port("7316")
#define SENTINEL ((void *)0x5a5a)

/* a setup step: 0 goes on; RPMA_E_PROVIDER (the injected fault) ends the run with status 3;
 * anything else fails the test */
#define STEP(expr)                                                                       \
	do {                                                                             \
		int step_ = (expr);                                                      \
		if (step_ == RPMA_E_PROVIDER) {                                          \
			printf("fault: %s = PROVIDER\n", #expr);                         \
			goto out;                                                        \
		}                                                                        \
		CHECK(step_);                                                            \
	} while (0)

int main(void)
{
	int status = 3;
	struct ibv_context *ctx = NULL;
	struct rpma_peer *peer = NULL;
	struct rpma_mr_local *mr = NULL;
	struct rpma_conn_cfg *cfg = NULL;
	struct rpma_ep *ep = NULL;
	struct rpma_conn_req *req = NULL, *sreq = NULL;
	struct rpma_conn *conn = NULL, *sconn = NULL;
	static char buf[4096];

	CHECK(rpma_utils_get_ibv_context(ADDR, RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));
	CHECK(rpma_peer_new(ctx, &peer));
	CHECK(rpma_mr_reg(peer, buf, sizeof(buf), RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &mr));
	CHECK(rpma_conn_cfg_new(&cfg));
	CHECK(rpma_conn_cfg_set_rcq_size(cfg, 4));
	CHECK(rpma_conn_cfg_set_compl_channel(cfg, true));
	CHECK(rpma_ep_listen(peer, ADDR, PORT, &ep));
	STEP(rpma_conn_req_new(peer, ADDR, PORT, cfg, &req));
	STEP(rpma_conn_req_connect(&req, NULL, &conn));
	STEP(rpma_ep_next_conn_req(ep, NULL, &sreq));
	STEP(rpma_conn_req_connect(&sreq, NULL, &sconn));
	enum rpma_conn_event ev;
	CHECK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_ESTABLISHED);
	CHECK(rpma_conn_next_event(sconn, &ev));
	EXPECT(ev == RPMA_CONN_ESTABLISHED);

	CHECK(rpma_recv(conn, mr, 0, 16, (void *)1));
	strcpy(buf + 100, "woken");
	CHECK(rpma_send(sconn, mr, 100, 6, RPMA_F_COMPLETION_ON_ERROR, NULL));
	struct rpma_cq *which = SENTINEL, *rcq = NULL;
	bool is_rcq = false;
	CHECK(rpma_conn_get_rcq(conn, &rcq));
	int ret = rpma_conn_wait(conn, 0, &which, &is_rcq);
	if (ret == RPMA_E_PROVIDER) {
		EXPECT(which == NULL);
		printf("fault: wait PROVIDER\n");
	} else {
		CHECK(ret);
		EXPECT(which == rcq && is_rcq);
		printf("fault: wait OK\n");
	}
	/* the message is there either way */
	struct ibv_wc wc;
	while ((ret = rpma_cq_get_wc(rcq, 1, &wc, NULL)) == RPMA_E_NO_COMPLETION)
		;
	CHECK(ret);
	EXPECT(wc.status == IBV_WC_SUCCESS && wc.wr_id == 1 && strcmp(buf, "woken") == 0);
	CHECK(rpma_conn_disconnect(conn));
	CHECK(rpma_conn_next_event(sconn, &ev));
	CHECK(rpma_conn_disconnect(sconn));
	CHECK(rpma_conn_next_event(conn, &ev));
	status = 0;
out:
	CHECK(rpma_conn_delete(&conn));
	CHECK(rpma_conn_delete(&sconn));
	CHECK(rpma_conn_req_delete(&req));
	CHECK(rpma_conn_req_delete(&sreq));
	CHECK(rpma_ep_shutdown(&ep));
	CHECK(rpma_conn_cfg_delete(&cfg));
	CHECK(rpma_mr_dereg(&mr));
	CHECK(rpma_peer_delete(&peer));
	return status;
}
