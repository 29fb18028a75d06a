/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Thread safety on RPMA_BACKEND=mock (and verbs): two threads post signaled writes on one connection
 * while a third polls its CQ (rpma_cq_get_wc) and a server thread waits for the connection's
 * next event, many iterations. librpma documents the data path and rpma_cq_get_wc as
 * thread-safe; every write must complete successfully, exactly once.
 *
 * Then one thread blocks in rpma_cq_wait while the main thread uses the connection (1000 calls
 * that take its lock) and watches the CQ's fd: a wait must leave the fd's flags alone (the
 * library waits in poll(2), it does not make the fd non-blocking for a while), and a signaled
 * write from the main thread must end the wait.
 */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <librpma.h>

#include "check.h"

#define ADDR test_addr()
#define PORT test_port("7317")
#define ITERS 5000
#define WRITERS 2
#define CREDITS 16

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int listening;
static sem_t credits;

static struct rpma_conn *conn;
static struct rpma_mr_remote *remote;
static struct rpma_mr_local *src_mr;
static int seen[WRITERS][ITERS];

static void *server(void *arg)
{
	(void)arg;
	struct rpma_peer *peer = peer_at(ADDR);
	char *target = aligned_alloc(4096, 4096);
	EXPECT(target);
	memset(target, 0, 4096);
	struct rpma_mr_local *mr = NULL;
	CHECK(rpma_mr_reg(peer, target, 4096, RPMA_MR_USAGE_WRITE_DST, &mr));
	char desc[21];
	CHECK(rpma_mr_get_descriptor(mr, desc));
	struct rpma_ep *ep = NULL;
	CHECK(rpma_ep_listen(peer, ADDR, PORT, &ep));
	pthread_mutex_lock(&lock);
	listening = 1;
	pthread_cond_signal(&cond);
	pthread_mutex_unlock(&lock);

	struct rpma_conn_req *req = NULL;
	CHECK(rpma_ep_next_conn_req(ep, NULL, &req));
	struct rpma_conn_private_data out = {desc, sizeof(desc)};
	struct rpma_conn *c = NULL;
	CHECK(rpma_conn_req_connect(&req, &out, &c));
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	CHECK(rpma_conn_next_event(c, &ev));
	EXPECT(ev == RPMA_CONN_ESTABLISHED);
	CHECK(rpma_conn_next_event(c, &ev));
	EXPECT(ev == RPMA_CONN_CLOSED);
	CHECK(rpma_conn_disconnect(c));
	CHECK(rpma_conn_delete(&c));
	CHECK(rpma_ep_shutdown(&ep));
	CHECK(rpma_mr_dereg(&mr));
	CHECK(rpma_peer_delete(&peer));
	free(target);
	return NULL;
}

static void *writer(void *arg)
{
	long w = (long)arg;
	for (long i = 0; i < ITERS; i++) {
		while (sem_wait(&credits) != 0)
			;
		uintptr_t ctx = ((uintptr_t)w << 32) | (uintptr_t)i;
		CHECK(rpma_write(conn, remote, (size_t)w * 64, src_mr, (size_t)w * 64, 64,
			RPMA_F_COMPLETION_ALWAYS, (void *)ctx));
	}
	return NULL;
}

static void *poller(void *arg)
{
	(void)arg;
	struct rpma_cq *cq = NULL;
	CHECK(rpma_conn_get_cq(conn, &cq));
	long got = 0;
	while (got < (long)WRITERS * ITERS) {
		struct ibv_wc wc[4];
		int n = 0;
		int ret = rpma_cq_get_wc(cq, 4, wc, &n);
		if (ret == RPMA_E_NO_COMPLETION) {
			sched_yield();
			continue;
		}
		CHECK(ret);
		for (int k = 0; k < n; k++) {
			EXPECT(wc[k].status == IBV_WC_SUCCESS && wc[k].opcode == IBV_WC_RDMA_WRITE);
			uint64_t w = wc[k].wr_id >> 32, i = wc[k].wr_id & 0xffffffffu;
			EXPECT(w < WRITERS && i < ITERS && !seen[w][i]);
			seen[w][i] = 1;
			got++;
			sem_post(&credits);
		}
	}
	return NULL;
}

#define STOP_CTX ((uintptr_t)0x5709)

/* Waits on the CQ and drains it until the completion of the write with STOP_CTX. */
static void *waiter(void *arg)
{
	struct rpma_cq *cq = arg;
	for (;;) {
		CHECK(rpma_cq_wait(cq));
		struct ibv_wc wc;
		int n = 0, ret;
		while ((ret = rpma_cq_get_wc(cq, 1, &wc, &n)) == 0) {
			EXPECT(n == 1 && wc.status == IBV_WC_SUCCESS);
			if (wc.wr_id == STOP_CTX)
				return NULL;
		}
		EXPECT(ret == RPMA_E_NO_COMPLETION);
	}
}

/* A blocking wait in one thread while another uses the connection and looks at the fd. */
static void wait_beside_calls(void)
{
	struct rpma_cq *cq = NULL;
	CHECK(rpma_conn_get_cq(conn, &cq));
	int fd = -1;
	CHECK(rpma_cq_get_fd(cq, &fd));
	int flags = fcntl(fd, F_GETFL);
	EXPECT(flags >= 0 && !(flags & O_NONBLOCK));
	pthread_t w;
	EXPECT(pthread_create(&w, NULL, waiter, cq) == 0);
	/* Give the waiter 10 ms to fall asleep, then watch the fd's flags for 20 ms without any
	 * rpma call (a wait that made the fd non-blocking while it slept would show here). */
	struct timespec nap = {0, 10 * 1000 * 1000}, t0, t;
	nanosleep(&nap, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		EXPECT(fcntl(fd, F_GETFL) == flags);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 20 * 1000 * 1000L);
	/* Calls that take the connection's lock go through while the wait sleeps. */
	for (int i = 0; i < 1000; i++) {
		uint32_t qpn = 0;
		CHECK(rpma_conn_get_qp_num(conn, &qpn));
		EXPECT(fcntl(fd, F_GETFL) == flags);
		if (i % 100 == 0)
			sched_yield();
	}
	CHECK(rpma_write(conn, remote, 0, src_mr, 0, 8, RPMA_F_COMPLETION_ALWAYS, (void *)STOP_CTX));
	EXPECT(pthread_join(w, NULL) == 0);
	EXPECT(fcntl(fd, F_GETFL) == flags);
}

int main(void)
{
	EXPECT(sem_init(&credits, 0, CREDITS) == 0);
	pthread_t s;
	EXPECT(pthread_create(&s, NULL, server, NULL) == 0);
	pthread_mutex_lock(&lock);
	while (!listening)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);

	struct rpma_peer *peer = peer_at(ADDR);
	char *src = aligned_alloc(4096, 4096);
	EXPECT(src);
	memset(src, 'x', 4096);
	CHECK(rpma_mr_reg(peer, src, 4096, RPMA_MR_USAGE_WRITE_SRC, &src_mr));
	struct rpma_conn_cfg *cfg = NULL;
	CHECK(rpma_conn_cfg_new(&cfg));
	CHECK(rpma_conn_cfg_set_sq_size(cfg, 2 * CREDITS));
	CHECK(rpma_conn_cfg_set_cq_size(cfg, 2 * CREDITS));
	struct rpma_conn_req *req = NULL;
	CHECK(rpma_conn_req_new(peer, ADDR, PORT, cfg, &req));
	CHECK(rpma_conn_cfg_delete(&cfg));
	CHECK(rpma_conn_req_connect(&req, NULL, &conn));
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	CHECK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_ESTABLISHED);
	struct rpma_conn_private_data pd;
	CHECK(rpma_conn_get_private_data(conn, &pd));
	EXPECT(pd.len >= 21);
	CHECK(rpma_mr_remote_from_descriptor(pd.ptr, 21, &remote));

	pthread_t t[WRITERS + 1];
	for (long w = 0; w < WRITERS; w++)
		EXPECT(pthread_create(&t[w], NULL, writer, (void *)w) == 0);
	EXPECT(pthread_create(&t[WRITERS], NULL, poller, NULL) == 0);
	for (int k = 0; k <= WRITERS; k++)
		EXPECT(pthread_join(t[k], NULL) == 0);
	for (int w = 0; w < WRITERS; w++)
		for (int i = 0; i < ITERS; i++)
			EXPECT(seen[w][i]);
	wait_beside_calls();

	CHECK(rpma_conn_disconnect(conn));
	CHECK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_CLOSED);
	CHECK(rpma_conn_delete(&conn));
	CHECK(rpma_mr_remote_delete(&remote));
	CHECK(rpma_mr_dereg(&src_mr));
	CHECK(rpma_peer_delete(&peer));
	EXPECT(pthread_join(s, NULL) == 0);
	free(src);
	printf("threads: OK\n");
	return 0;
}
