/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the C ABI adds per post and per poll: N 8-byte writes, each posted through post_op()
 * (rpma_write, every one signaled) and completed through poll_cq() (rpma_cq_get_wc of one
 * entry), on RPMA_BACKEND=mock in one process (a server thread accepts and waits for the
 * disconnect). scripts/bench-capi.sh runs it under callgrind and compares the instructions of
 * these two functions per call with rpma bench's post_op and poll_cq (the Rust API, same
 * backend, same operation): the two wrappers have the same shape, the arguments in and one
 * library call out.
 *
 * Usage: overhead N
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librpma.h>

#include "../tests/c/check.h"

#define ADDR "127.0.0.1"
#define PORT "7391"
#define SIZE 4096

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int listening;
static char desc[32];
static size_t desc_size;

static void *server(void *arg)
{
	(void)arg;
	struct rpma_peer *peer = peer_at(ADDR);
	char *target = aligned_alloc(4096, SIZE);
	if (!target)
		exit(1);
	struct rpma_mr_local *mr = NULL;
	CHECK(rpma_mr_reg(peer, target, SIZE, RPMA_MR_USAGE_WRITE_DST, &mr));
	CHECK(rpma_mr_get_descriptor_size(mr, &desc_size));
	CHECK(rpma_mr_get_descriptor(mr, desc));
	struct rpma_ep *ep = NULL;
	CHECK(rpma_ep_listen(peer, ADDR, PORT, &ep));
	pthread_mutex_lock(&lock);
	listening = 1;
	pthread_cond_signal(&cond);
	pthread_mutex_unlock(&lock);
	struct rpma_conn_req *req = NULL;
	struct rpma_conn *conn = NULL;
	CHECK(rpma_ep_next_conn_req(ep, NULL, &req));
	struct rpma_conn_private_data out = {desc, (uint8_t)desc_size};
	CHECK(rpma_conn_req_connect(&req, &out, &conn));
	enum rpma_conn_event ev;
	CHECK(rpma_conn_next_event(conn, &ev)); /* ESTABLISHED */
	CHECK(rpma_conn_next_event(conn, &ev)); /* CLOSED */
	CHECK(rpma_conn_disconnect(conn));
	CHECK(rpma_conn_delete(&conn));
	CHECK(rpma_ep_shutdown(&ep));
	CHECK(rpma_mr_dereg(&mr));
	CHECK(rpma_peer_delete(&peer));
	free(target);
	return NULL;
}

__attribute__((noinline)) static int post_op(struct rpma_conn *c, struct rpma_mr_remote *dst,
					    struct rpma_mr_local *src, size_t off, size_t len)
{
	return rpma_write(c, dst, off, src, off, len, RPMA_F_COMPLETION_ALWAYS, NULL);
}

__attribute__((noinline)) static int poll_cq(struct rpma_cq *cq, struct ibv_wc *wc)
{
	int n = 0;
	int ret = rpma_cq_get_wc(cq, 1, wc, &n);
	if (ret == RPMA_E_NO_COMPLETION)
		return 0;
	CHECK(ret);
	return n;
}

int main(int argc, char *argv[])
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s N\n", argv[0]);
		return 2;
	}
	long n = strtol(argv[1], NULL, 10);
	if (n < 1) {
		fprintf(stderr, "N must be at least 1\n");
		return 2;
	}
	pthread_t st;
	if (pthread_create(&st, NULL, server, NULL))
		return 1;
	pthread_mutex_lock(&lock);
	while (!listening)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);

	struct rpma_peer *peer = peer_at(ADDR);
	char *src = aligned_alloc(4096, SIZE);
	if (!src)
		return 1;
	memset(src, 7, SIZE);
	struct rpma_mr_local *src_mr = NULL;
	CHECK(rpma_mr_reg(peer, src, SIZE, RPMA_MR_USAGE_WRITE_SRC, &src_mr));
	struct rpma_conn_req *req = NULL;
	struct rpma_conn *conn = NULL;
	CHECK(rpma_conn_req_new(peer, ADDR, PORT, NULL, &req));
	CHECK(rpma_conn_req_connect(&req, NULL, &conn));
	enum rpma_conn_event ev;
	CHECK(rpma_conn_next_event(conn, &ev));
	struct rpma_conn_private_data pd;
	CHECK(rpma_conn_get_private_data(conn, &pd));
	struct rpma_mr_remote *dst = NULL;
	CHECK(rpma_mr_remote_from_descriptor(pd.ptr, desc_size, &dst));
	struct rpma_cq *cq = NULL;
	CHECK(rpma_conn_get_cq(conn, &cq));

	struct ibv_wc wc;
	for (long i = 0; i < n; i++) {
		CHECK(post_op(conn, dst, src_mr, (size_t)(i % 8) * 8, 8));
		while (!poll_cq(cq, &wc))
			;
		if (wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "completion %ld: status %d\n", i, (int)wc.status);
			return 1;
		}
	}
	CHECK(rpma_conn_disconnect(conn));
	CHECK(rpma_conn_next_event(conn, &ev));
	CHECK(rpma_conn_delete(&conn));
	CHECK(rpma_mr_remote_delete(&dst));
	CHECK(rpma_mr_dereg(&src_mr));
	CHECK(rpma_peer_delete(&peer));
	pthread_join(st, NULL);
	free(src);
	printf("writes=%ld\n", n);
	return 0;
}
