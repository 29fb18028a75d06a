/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rpma_mr_dereg of a region a peer is reaching right now: a client thread loops
 * large one-sided operations on the server's region (a 32 MiB rpma_write followed by a flush to
 * visibility, or a 32 MiB rpma_read) while the server thread deregisters the region mid-loop.
 * Once rpma_mr_dereg returned 0 the buffer is the program's again (librpma's contract), so the
 * server then either makes it inaccessible (mprotect PROT_NONE: any later access by the library
 * faults, and the fault handler reports it) or reuses it (fills it with a canary, checked once
 * the client has stopped: no byte may change). Each round uses a new connection (the operation
 * after the deregistration fails and moves the queue pair to the error state); rounds cycle
 * through write + reuse, write + PROT_NONE, read + PROT_NONE. RPMA_TEST_ROUNDS (default 12)
 * sets the number of rounds.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <librpma.h>

#include "check.h"

#define ADDR test_addr()
#define PORT test_port("7321")
#define SIZE ((size_t)32 << 20)
#define CANARY 0xA5
#define SRC_BYTE 0x5A

enum mode { WRITE_REUSE, WRITE_PROTECT, READ_PROTECT };

static const char *const mode_name[] = { "write+reuse", "write+PROT_NONE", "read+PROT_NONE" };

/* the server's buffer once rpma_mr_dereg returned 0 and it was made PROT_NONE */
static char *volatile guarded;

/* operations the client completed in the current round */
static atomic_int ops_done;

struct client_arg {
	struct rpma_peer *peer;
	struct rpma_mr_local *local; /* WRITE_SRC | READ_DST, SIZE bytes */
	enum mode mode;
};

static void on_fault(int sig, siginfo_t *info, void *uctx)
{
	(void)uctx;
	char *a = info->si_addr;
	char *g = guarded;
	if (g && a >= g && a < g + SIZE) {
		static const char msg[] =
			"dereg_race: FAULT: the library touched the buffer after rpma_mr_dereg returned 0\n";
		ssize_t r = write(2, msg, sizeof(msg) - 1);
		(void)r;
		_exit(3);
	}
	/* not ours: SA_RESETHAND restored the default action, which the return re-raises */
	(void)sig;
}

static struct ibv_wc next_wc(struct rpma_cq *cq)
{
	struct ibv_wc wc;
	for (;;) {
		int n = 0;
		int ret = rpma_cq_get_wc(cq, 1, &wc, &n);
		if (ret == 0)
			return wc;
		EXPECT(ret == RPMA_E_NO_COMPLETION);
		ret = rpma_cq_wait(cq);
		EXPECT(ret == 0 || ret == RPMA_E_NO_COMPLETION);
	}
}

static void *client(void *argp)
{
	struct client_arg *arg = argp;
	struct rpma_conn_req *req = NULL;
	CHECK(rpma_conn_req_new(arg->peer, ADDR, PORT, NULL, &req));
	struct rpma_conn *conn = NULL;
	CHECK(rpma_conn_req_connect(&req, NULL, &conn));
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	CHECK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_ESTABLISHED);
	struct rpma_conn_private_data pdata;
	CHECK(rpma_conn_get_private_data(conn, &pdata));
	struct rpma_mr_remote *remote = NULL;
	CHECK(rpma_mr_remote_from_descriptor(pdata.ptr, pdata.len, &remote));
	struct rpma_cq *cq = NULL;
	CHECK(rpma_conn_get_cq(conn, &cq));

	/* until an operation fails: the region was deregistered */
	for (uintptr_t i = 1;; i++) {
		int ret;
		if (arg->mode == READ_PROTECT) {
			ret = rpma_read(conn, arg->local, 0, remote, 0, SIZE, RPMA_F_COMPLETION_ALWAYS,
					(void *)i);
		} else {
			ret = rpma_write(conn, remote, 0, arg->local, 0, SIZE, RPMA_F_COMPLETION_ON_ERROR,
					 NULL);
			if (ret == 0)
				ret = rpma_flush(conn, remote, 0, SIZE, RPMA_FLUSH_TYPE_VISIBILITY,
						 RPMA_F_COMPLETION_ALWAYS, (void *)i);
		}
		if (ret)
			break;
		struct ibv_wc wc = next_wc(cq);
		if (wc.status != IBV_WC_SUCCESS)
			break;
		atomic_fetch_add(&ops_done, 1);
	}
	CHECK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_CLOSED);
	CHECK(rpma_conn_disconnect(conn));
	CHECK(rpma_conn_delete(&conn));
	CHECK(rpma_mr_remote_delete(&remote));
	return NULL;
}

/* one round; returns the number of canary bytes changed after the dereg (reuse only) */
static size_t round_of(struct rpma_peer *speer, struct rpma_ep *ep, struct client_arg *carg, unsigned seed)
{
	char *buf = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	EXPECT(buf != MAP_FAILED);
	memset(buf, 0x11, SIZE);
	int usage = carg->mode == READ_PROTECT ? RPMA_MR_USAGE_READ_SRC
					       : RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY;
	struct rpma_mr_local *mr = NULL;
	CHECK(rpma_mr_reg(speer, buf, SIZE, usage, &mr));
	char desc[64];
	size_t desc_size = 0;
	CHECK(rpma_mr_get_descriptor_size(mr, &desc_size));
	EXPECT(desc_size <= sizeof(desc));
	CHECK(rpma_mr_get_descriptor(mr, desc));

	atomic_store(&ops_done, 0);
	pthread_t c;
	EXPECT(pthread_create(&c, NULL, client, carg) == 0);
	struct rpma_conn_req *req = NULL;
	CHECK(rpma_ep_next_conn_req(ep, NULL, &req));
	struct rpma_conn_private_data pdata = { desc, (uint8_t)desc_size };
	struct rpma_conn *conn = NULL;
	CHECK(rpma_conn_req_connect(&req, &pdata, &conn));
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	CHECK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_ESTABLISHED);

	/* deregister in the middle of the client's loop */
	while (atomic_load(&ops_done) < 1)
		usleep(100);
	usleep(seed % 3000);
	int r = rpma_mr_dereg(&mr);
	if (r != 0)
		fprintf(stderr, "dereg_race: rpma_mr_dereg = %d (%s)\n", r, rpma_err_2str(r));
	EXPECT(r == 0);
	EXPECT(mr == NULL);
	/* the buffer is the program's again */
	if (carg->mode == WRITE_REUSE) {
		memset(buf, CANARY, SIZE);
	} else {
		guarded = buf;
		EXPECT(mprotect(buf, SIZE, PROT_NONE) == 0);
	}

	CHECK(rpma_conn_disconnect(conn));
	CHECK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_CLOSED);
	CHECK(rpma_conn_delete(&conn));
	EXPECT(pthread_join(c, NULL) == 0);

	size_t changed = 0;
	if (carg->mode == WRITE_REUSE) {
		for (size_t i = 0; i < SIZE; i++)
			changed += (unsigned char)buf[i] != CANARY;
	}
	guarded = NULL;
	EXPECT(munmap(buf, SIZE) == 0);
	return changed;
}

int main(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_fault;
	sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
	sigemptyset(&sa.sa_mask);
	EXPECT(sigaction(SIGSEGV, &sa, NULL) == 0);
	EXPECT(sigaction(SIGBUS, &sa, NULL) == 0);

	const char *rs = getenv("RPMA_TEST_ROUNDS");
	int rounds = rs && *rs ? atoi(rs) : 12;
	EXPECT(rounds > 0);

	struct rpma_peer *speer = peer_at(ADDR);
	struct rpma_ep *ep = NULL;
	CHECK(rpma_ep_listen(speer, ADDR, PORT, &ep));

	struct client_arg carg = { peer_at(ADDR), NULL, WRITE_REUSE };
	char *src = aligned_alloc(4096, SIZE);
	EXPECT(src);
	memset(src, SRC_BYTE, SIZE);
	CHECK(rpma_mr_reg(carg.peer, src, SIZE, RPMA_MR_USAGE_WRITE_SRC | RPMA_MR_USAGE_READ_DST, &carg.local));

	for (int i = 0; i < rounds; i++) {
		carg.mode = (enum mode)(i % 3);
		size_t changed = round_of(speer, ep, &carg, (unsigned)i * 2654435761u);
		if (changed) {
			fprintf(stderr,
				"dereg_race: round %d (%s): %zu bytes of the reused buffer changed after "
				"rpma_mr_dereg returned 0\n",
				i, mode_name[carg.mode], changed);
			return 4;
		}
	}

	CHECK(rpma_mr_dereg(&carg.local));
	free(src);
	CHECK(rpma_peer_delete(&carg.peer));
	CHECK(rpma_ep_shutdown(&ep));
	CHECK(rpma_peer_delete(&speer));
	printf("dereg_race: %d rounds: OK\n", rounds);
	return 0;
}
