/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * End to end: a server and a client, as two threads of one process (no argument; on
 * RPMA_BACKEND=mock or verbs) or as two processes (`e2e server`, which prints "e2e: listening"
 * once it listens, then `e2e client`; on a device, each side on this librpma or another one,
 * e.g. Debian's). The server registers a target region and accepts with its descriptor plus
 * its peer configuration as private data; the client writes, flushes (persistent), atomic-
 * writes, reads back, and sends with immediate data; the server checks what arrived. Then both
 * tear down. Every call is checked; any failure exits non-zero with the line.
 *
 * RPMA_TEST_ADDR and RPMA_TEST_PORT choose the address (default 127.0.0.1, the mock's) and the
 * port. RPMA_INTEROP_NO_PERSISTENT=1: the target is registered without persistent flush
 * (librpma 1.3 asks a device with native flush for IBV_ACCESS_FLUSH_PERSISTENT, which the
 * kernel grants on pmem only) and the client flushes to visibility only.
 */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librpma.h>

#include "check.h"

#define ADDR test_addr()
#define PORT test_port("7311")
#define TARGET_SIZE 4096
#define MSG_SIZE 64
#define IMM 0x01020304u

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int listening;

static const char DATA[] = "written by rpma-rs through C";
static const char ATOMIC[8] = {'c', 'o', 'm', 'm', 'i', 't', '!', '\0'};
static const char MSG[] = "done";

/* one side of two processes: "server", "client"; NULL: both, as threads */
static const char *role;

static int no_persistent(void)
{
	const char *v = getenv("RPMA_INTEROP_NO_PERSISTENT");
	return v && *v && *v != '0';
}

/* waits for the next completion on cq (with rpma_cq_wait) and returns it */
static struct ibv_wc next_wc(struct rpma_cq *cq)
{
	struct ibv_wc wc;
	for (;;) {
		int n = 0;
		int ret = rpma_cq_get_wc(cq, 1, &wc, &n);
		if (ret == 0) {
			EXPECT(n == 1);
			return wc;
		}
		EXPECT(ret == RPMA_E_NO_COMPLETION);
		CHECK(rpma_cq_wait(cq));
	}
}

static struct rpma_peer *new_peer(void)
{
	struct ibv_context *ctx = NULL;
	struct rpma_peer *peer = NULL;
	CHECK(rpma_utils_get_ibv_context(ADDR, RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));
	EXPECT(ctx != NULL);
	int odp = -1;
	CHECK(rpma_utils_ibv_context_is_odp_capable(ctx, &odp));
	EXPECT(odp == 0 || odp == 1);
	CHECK(rpma_peer_new(ctx, &peer));
	return peer;
}

static void *server(void *arg)
{
	(void)arg;
	struct rpma_peer *peer = new_peer();

	char *target = aligned_alloc(4096, TARGET_SIZE);
	char *inbox = aligned_alloc(4096, 4096);
	EXPECT(target && inbox);
	memset(target, 0, TARGET_SIZE);
	memset(inbox, 0, MSG_SIZE);
	struct rpma_mr_local *target_mr = NULL, *inbox_mr = NULL;
	CHECK(rpma_mr_reg(peer, target, TARGET_SIZE,
		RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC |
			(no_persistent() ? 0 : RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT) |
			RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY,
		&target_mr));
	CHECK(rpma_mr_reg(peer, inbox, MSG_SIZE, RPMA_MR_USAGE_RECV, &inbox_mr));
	void *p = NULL;
	size_t size = 0;
	CHECK(rpma_mr_get_ptr(target_mr, &p));
	CHECK(rpma_mr_get_size(target_mr, &size));
	EXPECT(p == target && size == TARGET_SIZE);

	/* private data: the target's descriptor, then this peer's configuration */
	size_t mr_desc_size = 0, pcfg_desc_size = 0;
	struct rpma_peer_cfg *pcfg = NULL;
	CHECK(rpma_peer_cfg_new(&pcfg));
	CHECK(rpma_peer_cfg_set_direct_write_to_pmem(pcfg, true));
	CHECK(rpma_mr_get_descriptor_size(target_mr, &mr_desc_size));
	CHECK(rpma_peer_cfg_get_descriptor_size(pcfg, &pcfg_desc_size));
	EXPECT(mr_desc_size == 21 && pcfg_desc_size == 1);
	char desc[32];
	CHECK(rpma_mr_get_descriptor(target_mr, desc));
	CHECK(rpma_peer_cfg_get_descriptor(pcfg, desc + mr_desc_size));
	CHECK(rpma_peer_cfg_delete(&pcfg));
	EXPECT(pcfg == NULL);

	struct rpma_ep *ep = NULL;
	CHECK(rpma_ep_listen(peer, ADDR, PORT, &ep));
	int fd = -1;
	CHECK(rpma_ep_get_fd(ep, &fd));
	EXPECT(fd >= 0);
	pthread_mutex_lock(&lock);
	listening = 1;
	pthread_cond_signal(&cond);
	pthread_mutex_unlock(&lock);
	if (role) {
		printf("e2e: listening\n");
		fflush(stdout);
	}

	struct rpma_conn_req *req = NULL;
	CHECK(rpma_ep_next_conn_req(ep, NULL, &req));
	struct rpma_conn_private_data in;
	CHECK(rpma_conn_req_get_private_data(req, &in));
	EXPECT(in.len >= 5 && memcmp(in.ptr, "hello", 5) == 0);
	CHECK(rpma_conn_req_recv(req, inbox_mr, 0, MSG_SIZE, (void *)0x77));
	struct rpma_conn_private_data out = {desc, (uint8_t)(mr_desc_size + pcfg_desc_size)};
	struct rpma_conn *conn = NULL;
	CHECK(rpma_conn_req_connect(&req, &out, &conn));
	EXPECT(req == NULL && conn != NULL);
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	CHECK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_ESTABLISHED);
	CHECK(rpma_conn_get_private_data(conn, &in));
	EXPECT(in.len >= 5 && memcmp(in.ptr, "hello", 5) == 0);

	/* the client's message arrives after its write, flush and atomic write completed */
	struct rpma_cq *cq = NULL, *rcq = (struct rpma_cq *)1;
	CHECK(rpma_conn_get_cq(conn, &cq));
	CHECK(rpma_conn_get_rcq(conn, &rcq));
	EXPECT(cq != NULL && rcq == NULL);
	struct ibv_wc wc = next_wc(cq);
	EXPECT(wc.status == IBV_WC_SUCCESS);
	EXPECT(wc.wr_id == 0x77);
	EXPECT(wc.opcode == IBV_WC_RECV);
	EXPECT(wc.byte_len == sizeof(MSG));
	EXPECT(wc.wc_flags & IBV_WC_WITH_IMM);
	EXPECT(ntohl(wc.imm_data) == IMM);
	EXPECT(memcmp(inbox, MSG, sizeof(MSG)) == 0);
	EXPECT(memcmp(target, DATA, sizeof(DATA)) == 0);
	EXPECT(memcmp(target + 64, ATOMIC, 8) == 0);

	CHECK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_CLOSED);
	CHECK(rpma_conn_disconnect(conn));
	CHECK(rpma_conn_delete(&conn));
	EXPECT(conn == NULL);
	CHECK(rpma_conn_delete(&conn)); /* a second delete through the NULLed pointer */
	CHECK(rpma_ep_shutdown(&ep));
	EXPECT(ep == NULL);
	CHECK(rpma_mr_dereg(&target_mr));
	CHECK(rpma_mr_dereg(&inbox_mr));
	EXPECT(target_mr == NULL && inbox_mr == NULL);
	CHECK(rpma_peer_delete(&peer));
	EXPECT(peer == NULL);
	free(target);
	free(inbox);
	return NULL;
}

static void *client(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	while (!role && !listening)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	const int persistent = !no_persistent();
	const enum rpma_flush_type flush = persistent ? RPMA_FLUSH_TYPE_PERSISTENT :
		RPMA_FLUSH_TYPE_VISIBILITY;

	struct rpma_peer *peer = new_peer();
	char *src = aligned_alloc(4096, 4096);
	char *dst = aligned_alloc(4096, 4096);
	char *msg = aligned_alloc(4096, 4096);
	EXPECT(src && dst && msg);
	memcpy(src, DATA, sizeof(DATA));
	memset(dst, 0, 4096);
	memcpy(msg, MSG, sizeof(MSG));
	struct rpma_mr_local *src_mr = NULL, *dst_mr = NULL, *msg_mr = NULL;
	CHECK(rpma_mr_reg(peer, src, 4096, RPMA_MR_USAGE_WRITE_SRC, &src_mr));
	CHECK(rpma_mr_reg(peer, dst, 4096, RPMA_MR_USAGE_READ_DST, &dst_mr));
	CHECK(rpma_mr_reg(peer, msg, 4096, RPMA_MR_USAGE_SEND, &msg_mr));

	struct rpma_conn_cfg *cfg = NULL;
	CHECK(rpma_conn_cfg_new(&cfg));
	CHECK(rpma_conn_cfg_set_sq_size(cfg, 16));
	uint32_t sq = 0;
	CHECK(rpma_conn_cfg_get_sq_size(cfg, &sq));
	EXPECT(sq == 16);
	struct rpma_conn_req *req = NULL;
	CHECK(rpma_conn_req_new(peer, ADDR, PORT, cfg, &req));
	CHECK(rpma_conn_cfg_delete(&cfg));
	struct rpma_conn_private_data hello = {"hello", 5};
	struct rpma_conn *conn = NULL;
	CHECK(rpma_conn_req_connect(&req, &hello, &conn));
	EXPECT(req == NULL);
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	CHECK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_ESTABLISHED);

	/* the server's descriptors */
	struct rpma_conn_private_data pd;
	CHECK(rpma_conn_get_private_data(conn, &pd));
	EXPECT(pd.len >= 22);
	struct rpma_mr_remote *remote = NULL;
	CHECK(rpma_mr_remote_from_descriptor(pd.ptr, 21, &remote));
	size_t rsize = 0;
	int flush_type = 0;
	CHECK(rpma_mr_remote_get_size(remote, &rsize));
	CHECK(rpma_mr_remote_get_flush_type(remote, &flush_type));
	EXPECT(rsize == TARGET_SIZE);
	EXPECT(flush_type ==
		((persistent ? RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT : 0) |
			RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY));
	struct rpma_peer_cfg *rcfg = NULL;
	CHECK(rpma_peer_cfg_from_descriptor((char *)pd.ptr + 21, 1, &rcfg));
	bool direct = false;
	CHECK(rpma_peer_cfg_get_direct_write_to_pmem(rcfg, &direct));
	EXPECT(direct);

	/* before the remote configuration is applied, a persistent flush is not supported */
	if (persistent)
		EXPECT(rpma_flush(conn, remote, 0, sizeof(DATA), RPMA_FLUSH_TYPE_PERSISTENT,
			       RPMA_F_COMPLETION_ALWAYS, NULL) == RPMA_E_NOSUPP);
	CHECK(rpma_conn_apply_remote_peer_cfg(conn, rcfg));
	CHECK(rpma_peer_cfg_delete(&rcfg));

	struct rpma_cq *cq = NULL;
	CHECK(rpma_conn_get_cq(conn, &cq));
	int cq_fd = -1;
	CHECK(rpma_cq_get_fd(cq, &cq_fd));
	EXPECT(cq_fd >= 0);
	uint32_t qp_num = 0;
	CHECK(rpma_conn_get_qp_num(conn, &qp_num));

	/* write, then flush: only the flush completes */
	CHECK(rpma_write(conn, remote, 0, src_mr, 0, sizeof(DATA), RPMA_F_COMPLETION_ON_ERROR, NULL));
	CHECK(rpma_flush(conn, remote, 0, sizeof(DATA), flush, RPMA_F_COMPLETION_ALWAYS,
		(void *)2));
	struct ibv_wc wc = next_wc(cq);
	EXPECT(wc.status == IBV_WC_SUCCESS && wc.wr_id == 2 && wc.qp_num == qp_num);

	/* atomic write of the commit record, made visible */
	CHECK(rpma_atomic_write(conn, remote, 64, ATOMIC, RPMA_F_COMPLETION_ALWAYS, (void *)3));
	wc = next_wc(cq);
	EXPECT(wc.status == IBV_WC_SUCCESS && wc.wr_id == 3);
	CHECK(rpma_flush(conn, remote, 64, 8, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS,
		(void *)4));
	wc = next_wc(cq);
	EXPECT(wc.status == IBV_WC_SUCCESS && wc.wr_id == 4);

	/* read both back */
	CHECK(rpma_read(conn, dst_mr, 0, remote, 0, 72, RPMA_F_COMPLETION_ALWAYS, (void *)5));
	wc = next_wc(cq);
	EXPECT(wc.status == IBV_WC_SUCCESS && wc.wr_id == 5 && wc.opcode == IBV_WC_RDMA_READ);
	EXPECT(memcmp(dst, DATA, sizeof(DATA)) == 0);
	EXPECT(memcmp(dst + 64, ATOMIC, 8) == 0);

	/* tell the server */
	CHECK(rpma_send_with_imm(conn, msg_mr, 0, sizeof(MSG), RPMA_F_COMPLETION_ALWAYS, IMM,
		(void *)6));
	wc = next_wc(cq);
	EXPECT(wc.status == IBV_WC_SUCCESS && wc.wr_id == 6 && wc.opcode == IBV_WC_SEND);

	CHECK(rpma_conn_disconnect(conn));
	CHECK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_CLOSED);
	CHECK(rpma_conn_delete(&conn));
	CHECK(rpma_mr_remote_delete(&remote));
	EXPECT(remote == NULL);
	CHECK(rpma_mr_dereg(&src_mr));
	CHECK(rpma_mr_dereg(&dst_mr));
	CHECK(rpma_mr_dereg(&msg_mr));
	CHECK(rpma_peer_delete(&peer));
	free(src);
	free(dst);
	free(msg);
	return NULL;
}

int main(int argc, char *argv[])
{
	if (argc > 1) {
		role = argv[1];
		if (strcmp(role, "server") == 0)
			server(NULL);
		else if (strcmp(role, "client") == 0)
			client(NULL);
		else {
			fprintf(stderr, "usage: e2e [server|client]\n");
			return 2;
		}
		printf("e2e %s: OK\n", role);
		return 0;
	}
	pthread_t s, c;
	EXPECT(pthread_create(&s, NULL, server, NULL) == 0);
	EXPECT(pthread_create(&c, NULL, client, NULL) == 0);
	EXPECT(pthread_join(c, NULL) == 0);
	EXPECT(pthread_join(s, NULL) == 0);
	printf("e2e: OK\n");
	return 0;
}
