/*
 * The C librpma side of scripts/bench-softroce.sh: the operations `rpma bench` measures, written
 * against C librpma (Debian's librpma-dev), so both run on the same device in the same run.
 *
 *   librpma_bench server ADDR PORT
 *       serve one connection: a 1 MiB region (its descriptor and a peer configuration with
 *       direct write to PMem go in the accept's private data); echo every message received
 *       (send ping-pong); exit 0 when the client disconnects. The server spins on its CQ;
 *       with SERVER_SLEEPS set in the environment it sleeps in poll(2) on its CQ's and its
 *       connection's fds when idle, and takes the completion event (rpma_cq_wait: read,
 *       ack, re-arm) once it has drained the CQ: one event per message.
 *   librpma_bench client ADDR PORT OP SIZE ITERS QD CQMOD
 *       OP: read | write | write-flush | flush | send | connect; WARMUP=100 operations first;
 *       prints one line "op=.. size=.. qd=.. ops=.. elapsed_s=.. msg_rate=.. p50_ns=.. posts=..
 *       polls=.."
 *
 * connect is connection setup, as `rpma bench --op connect`: per operation the client creates
 * a request (queues for QD 1), connects with the 16-byte private data "rpma-bench setup", waits
 * for ESTABLISHED, disconnects, waits for CLOSED and deletes the connection (SIZE, QD and CQMOD
 * do not apply; latency is the whole cycle); the server accepts each such request without
 * private data (queues for QD 128, as for every request: it sizes them before it sees one),
 * waits for ESTABLISHED and CLOSED, disconnects and deletes; a last request marked
 * "rpma-bench stop." ends the server.
 *
 * Semantics follow `rpma bench` (docs/bench.md): one-sided operations rotate over QD slots of
 * SIZE bytes, every CQMOD-th one (and the last) is signaled, latency is post to completion of a
 * signaled operation; write-flush is an unsignaled write then a persistent flush; send is a
 * ping-pong with the server's echo, latency half the round trip. The client busy-polls.
 *
 * Every post goes through post_op() (receives: post_recv()) and every poll through poll_cq(),
 * never inlined, so that
 * callgrind's --toggle-collect can count the instructions of each (scripts/bench-softroce.sh).
 * Any librpma error exits 1 with a message; a wait without progress for 60 s exits 1.
 */
#include <librpma.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/select.h>
#include <time.h>

#define REGION (1 << 20)
#define PDATA_LEN 22
#define STALL_NS (60ull * 1000000000ull)
#define WARMUP 100

static void die(const char *what, int r)
{
	fprintf(stderr, "librpma_bench: %s: %s\n", what, r ? rpma_err_2str(r) : "failed");
	exit(1);
}
#define CHECK(call) do { int r_ = (call); if (r_) die(#call, r_); } while (0)

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

enum op { OP_READ, OP_WRITE, OP_WRITE_FLUSH, OP_FLUSH, OP_SEND };

static unsigned long posts, polls;

/* One operation's work requests (the write of write-flush unsignaled). */
__attribute__((noinline)) static int post_op(struct rpma_conn *c, enum op op, struct rpma_mr_local *l,
					     struct rpma_mr_remote *r, size_t off, size_t len, int flags,
					     void *ctx)
{
	posts++;
	switch (op) {
	case OP_READ:
		return rpma_read(c, l, off, r, off, len, flags, ctx);
	case OP_WRITE:
		return rpma_write(c, r, off, l, off, len, flags, ctx);
	case OP_WRITE_FLUSH: {
		int ret = rpma_write(c, r, off, l, off, len, RPMA_F_COMPLETION_ON_ERROR, ctx);
		return ret ? ret : rpma_flush(c, r, off, len, RPMA_FLUSH_TYPE_PERSISTENT, flags, ctx);
	}
	case OP_FLUSH:
		return rpma_flush(c, r, off, len, RPMA_FLUSH_TYPE_PERSISTENT, flags, ctx);
	case OP_SEND:
		return rpma_send(c, l, off, len, flags, ctx);
	}
	return RPMA_E_INVAL;
}

__attribute__((noinline)) static int post_recv(struct rpma_conn *c, struct rpma_mr_local *l, size_t len)
{
	return rpma_recv(c, l, 0, len, NULL);
}

__attribute__((noinline)) static int poll_cq(struct rpma_cq *cq, struct ibv_wc *wc)
{
	polls++;
	int n = 0;
	int ret = rpma_cq_get_wc(cq, 1, wc, &n);
	if (ret == RPMA_E_NO_COMPLETION)
		return 0;
	if (ret)
		die("rpma_cq_get_wc", ret);
	if (wc->status != IBV_WC_SUCCESS) {
		fprintf(stderr, "librpma_bench: completion failed: %s\n", ibv_wc_status_str(wc->status));
		exit(1);
	}
	return n;
}

/* Polls until one completion (failing after STALL_NS without one). */
static void next_wc(struct rpma_cq *cq, struct ibv_wc *wc)
{
	uint64_t since = now_ns();
	while (!poll_cq(cq, wc))
		if (now_ns() - since > STALL_NS)
			die("waiting for a completion (60 s)", 0);
}

static struct rpma_peer *peer_of(const char *addr)
{
	struct ibv_context *dev;
	struct rpma_peer *peer;
	CHECK(rpma_utils_get_ibv_context(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &dev));
	CHECK(rpma_peer_new(dev, &peer));
	return peer;
}

static struct rpma_conn_cfg *cfg_of(int qd)
{
	struct rpma_conn_cfg *cfg;
	CHECK(rpma_conn_cfg_new(&cfg));
	CHECK(rpma_conn_cfg_set_sq_size(cfg, 2 * qd + 2));
	CHECK(rpma_conn_cfg_set_rq_size(cfg, qd + 2));
	CHECK(rpma_conn_cfg_set_cq_size(cfg, 4 * qd + 8));
	return cfg;
}

static void wait_event(struct rpma_conn *c, enum rpma_conn_event want)
{
	enum rpma_conn_event ev;
	CHECK(rpma_conn_next_event(c, &ev));
	if (ev != want) {
		fprintf(stderr, "librpma_bench: connection event %s, expected %s\n", rpma_utils_conn_event_2str(ev),
			rpma_utils_conn_event_2str(want));
		exit(1);
	}
}

/* The mark of a connection-setup request: 1 SETUP, 2 STOP, 0 none (a connection of operations). */
#define MARK_LEN 16
static const char SETUP[MARK_LEN + 1] = "rpma-bench setup", STOP[MARK_LEN + 1] = "rpma-bench stop.";

static int setup_mark(const struct rpma_conn_req *req)
{
	struct rpma_conn_private_data pd;
	CHECK(rpma_conn_req_get_private_data(req, &pd));
	if (pd.ptr == NULL || pd.len < MARK_LEN)
		return 0;
	return !memcmp(pd.ptr, SETUP, MARK_LEN) ? 1 : !memcmp(pd.ptr, STOP, MARK_LEN) ? 2 : 0;
}

/* The server's part of one connection setup: accept, ESTABLISHED, CLOSED, disconnect, delete. */
static void serve_setup(struct rpma_conn_req *req)
{
	struct rpma_conn *conn;
	CHECK(rpma_conn_req_connect(&req, NULL, &conn));
	wait_event(conn, RPMA_CONN_ESTABLISHED);
	wait_event(conn, RPMA_CONN_CLOSED);
	CHECK(rpma_conn_disconnect(conn));
	CHECK(rpma_conn_delete(&conn));
}

static int server(const char *addr, const char *port)
{
	struct rpma_peer *peer = peer_of(addr);
	void *mem = aligned_alloc(4096, REGION), *msgs = aligned_alloc(4096, REGION);
	if (!mem || !msgs)
		die("aligned_alloc", 0);
	memset(mem, 0, REGION);
	struct rpma_mr_local *mr, *msg_mr;
	CHECK(rpma_mr_reg(peer, mem, REGION, RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_WRITE_DST |
		RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY | RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT, &mr));
	CHECK(rpma_mr_reg(peer, msgs, REGION, RPMA_MR_USAGE_RECV | RPMA_MR_USAGE_SEND, &msg_mr));
	uint8_t pdata[PDATA_LEN];
	size_t dsz;
	CHECK(rpma_mr_get_descriptor_size(mr, &dsz));
	CHECK(rpma_mr_get_descriptor(mr, pdata));
	struct rpma_peer_cfg *pcfg;
	CHECK(rpma_peer_cfg_new(&pcfg));
	CHECK(rpma_peer_cfg_set_direct_write_to_pmem(pcfg, true));
	CHECK(rpma_peer_cfg_get_descriptor(pcfg, pdata + dsz));
	struct rpma_ep *ep;
	CHECK(rpma_ep_listen(peer, addr, port, &ep));
	printf("LISTENING\n");
	fflush(stdout);
	int qd = 128;
	struct rpma_conn_cfg *cfg = cfg_of(qd);
	struct rpma_conn_req *req;
	CHECK(rpma_ep_next_conn_req(ep, cfg, &req));
	for (int mark; (mark = setup_mark(req));) {
		/* connection setups (client OP connect) until the one marked STOP */
		serve_setup(req);
		if (mark == 2) {
			CHECK(rpma_ep_shutdown(&ep));
			return 0;
		}
		CHECK(rpma_ep_next_conn_req(ep, cfg, &req));
	}
	const size_t slot = REGION / 128; /* one receive slot per queue entry */
	for (int i = 0; i < qd; i++)
		CHECK(rpma_conn_req_recv(req, msg_mr, (size_t)i * slot, slot, (void *)(uintptr_t)i));
	struct rpma_conn_private_data pd = {pdata, (uint8_t)(dsz + 1)};
	struct rpma_conn *conn;
	CHECK(rpma_conn_req_connect(&req, &pd, &conn));
	wait_event(conn, RPMA_CONN_ESTABLISHED);
	struct rpma_cq *cq;
	CHECK(rpma_conn_get_cq(conn, &cq));
	struct ibv_wc wc;
	unsigned idle = 0;
	const int sleeps = getenv("SERVER_SLEEPS") != NULL;
	struct pollfd fds[2] = {{-1, POLLIN, 0}, {-1, POLLIN, 0}}; /* the CQ's and the events' fds */
	CHECK(rpma_cq_get_fd(cq, &fds[0].fd));
	CHECK(rpma_conn_get_event_fd(conn, &fds[1].fd));
	int event = 0; /* a completion event poll(2) saw and not yet taken */
	for (;;) {
		int n = 0;
		int ret = rpma_cq_get_wc(cq, 1, &wc, &n);
		if (ret == RPMA_E_NO_COMPLETION && sleeps && event) {
			/*
			 * Drained: now take the event that woke the server, which re-arms the CQ, and
			 * poll once more before sleeping (a completion between the last poll and the
			 * re-arming raises no event). Taken only now, the CQ stayed unarmed while the
			 * server echoed, so the echo's own completion raised no second event (nor
			 * rxe's completion tasklet): one event a message, as rpma bench's server.
			 */
			event = 0;
			CHECK(rpma_cq_wait(cq));
			continue;
		}
		if (ret == RPMA_E_NO_COMPLETION && sleeps) {
			/*
			 * SERVER_SLEEPS: sleep in the kernel until a completion (the CQ is armed: at
			 * its creation, then by each rpma_cq_wait(), and polled after that) or a
			 * connection event (the client's disconnect) instead of spinning.
			 */
			if (poll(fds, 2, -1) < 0)
				die("server: poll", 0);
			if (fds[1].revents) {
				enum rpma_conn_event ev;
				CHECK(rpma_conn_next_event(conn, &ev));
				if (ev == RPMA_CONN_CLOSED)
					break;
			}
			if (fds[0].revents)
				event = 1; /* taken once the CQ is drained (above) */
			continue;
		}
		if (ret == RPMA_E_NO_COMPLETION) {
			enum rpma_conn_event ev;
			/*
			 * Every 1024th empty poll, a non-blocking look at the connection's events (CLOSED
			 * ends the run); in between the server spins in user space, as rpma bench's
			 * server does with --busy-poll (a syscall per empty poll would also hand the
			 * CPU to rxe's kernel work at every turn, which the Rust server does not do).
			 */
			if (++idle % 1024 != 0)
				continue;
			int fd;
			CHECK(rpma_conn_get_event_fd(conn, &fd));
			struct timespec z = {0, 0};
			fd_set set;
			FD_ZERO(&set);
			FD_SET(fd, &set);
			if (pselect(fd + 1, &set, NULL, NULL, &z, NULL) > 0) {
				CHECK(rpma_conn_next_event(conn, &ev));
				if (ev == RPMA_CONN_CLOSED)
					break;
			}
			continue;
		}
		if (ret)
			die("server: rpma_cq_get_wc", ret);
		idle = 0;
		if (wc.status != IBV_WC_SUCCESS)
			break; /* the client went away */
		/* an echo's own completion (IBV_WC_SEND) needs nothing more */
		if (wc.opcode == IBV_WC_RECV) {
			size_t i = (uintptr_t)wc.wr_id;
			/*
			 * Signaled, as rpma bench's server echoes: an unsignaled send keeps its
			 * send-queue slot until a later signaled one completes (rxe frees it anyway,
			 * a strict provider or librpma.so of rpma-capi does not).
			 */
			CHECK(rpma_send(conn, msg_mr, i * slot, wc.byte_len, RPMA_F_COMPLETION_ALWAYS, NULL));
			CHECK(rpma_recv(conn, msg_mr, i * slot, slot, (void *)(uintptr_t)i));
		}
	}
	rpma_conn_disconnect(conn);
	rpma_conn_delete(&conn);
	rpma_ep_shutdown(&ep);
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* One connection setup on the client: request, connect, ESTABLISHED, disconnect, CLOSED, delete. */
static void setup_once(struct rpma_peer *peer, const char *addr, const char *port, struct rpma_conn_cfg *cfg,
		       const char *mark)
{
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	CHECK(rpma_conn_req_new(peer, addr, port, cfg, &req));
	struct rpma_conn_private_data pd = {(void *)mark, MARK_LEN};
	CHECK(rpma_conn_req_connect(&req, &pd, &conn));
	wait_event(conn, RPMA_CONN_ESTABLISHED);
	CHECK(rpma_conn_disconnect(conn));
	wait_event(conn, RPMA_CONN_CLOSED);
	CHECK(rpma_conn_delete(&conn));
}

/* OP connect: WARMUP setups, ITERS measured ones, then the one that ends the server. */
static int connect_client(const char *addr, const char *port, long iters)
{
	if (iters < 1) {
		fprintf(stderr, "librpma_bench: bad iters\n");
		return 2;
	}
	struct rpma_peer *peer = peer_of(addr);
	struct rpma_conn_cfg *cfg = cfg_of(1);
	uint64_t *lat = malloc(sizeof(uint64_t) * (size_t)iters);
	if (!lat)
		die("malloc", 0);
	for (int i = 0; i < WARMUP; i++)
		setup_once(peer, addr, port, cfg, SETUP);
	uint64_t start = now_ns();
	for (long i = 0; i < iters; i++) {
		uint64_t t = now_ns();
		setup_once(peer, addr, port, cfg, SETUP);
		lat[i] = now_ns() - t;
	}
	double secs = (double)(now_ns() - start) / 1e9;
	setup_once(peer, addr, port, cfg, STOP);
	qsort(lat, (size_t)iters, sizeof(uint64_t), cmp_u64);
	printf("op=connect size=0 qd=1 ops=%ld elapsed_s=%.6f msg_rate=%.1f p50_ns=%llu posts=0 polls=0\n", iters,
	       secs, (double)iters / secs, (unsigned long long)lat[iters / 2]);
	free(lat);
	CHECK(rpma_conn_cfg_delete(&cfg));
	CHECK(rpma_peer_delete(&peer));
	return 0;
}

static int client(const char *addr, const char *port, const char *opname, size_t size, long iters, int qd,
		  int cqmod)
{
	if (!strcmp(opname, "connect"))
		return connect_client(addr, port, iters);
	enum op op;
	if (!strcmp(opname, "read"))
		op = OP_READ;
	else if (!strcmp(opname, "write"))
		op = OP_WRITE;
	else if (!strcmp(opname, "write-flush"))
		op = OP_WRITE_FLUSH;
	else if (!strcmp(opname, "flush"))
		op = OP_FLUSH;
	else if (!strcmp(opname, "send"))
		op = OP_SEND;
	else {
		fprintf(stderr, "librpma_bench: unknown op %s\n", opname);
		return 2;
	}
	if (size == 0 || qd < 1 || qd > 128 || cqmod < 1 || iters < 1 || (size_t)qd * size > REGION ||
	    (op == OP_SEND && (qd != 1 || size > REGION / 128))) {
		fprintf(stderr, "librpma_bench: bad size/iters/qd/cqmod (send: qd 1, size <= 8K)\n");
		return 2;
	}
	struct rpma_peer *peer = peer_of(addr);
	void *mem = aligned_alloc(4096, REGION), *inbox = aligned_alloc(4096, REGION);
	if (!mem || !inbox)
		die("aligned_alloc", 0);
	memset(mem, 0x5a, REGION);
	struct rpma_mr_local *mr, *in_mr;
	CHECK(rpma_mr_reg(peer, mem, REGION, RPMA_MR_USAGE_WRITE_SRC | RPMA_MR_USAGE_READ_DST |
		RPMA_MR_USAGE_SEND, &mr));
	CHECK(rpma_mr_reg(peer, inbox, REGION, RPMA_MR_USAGE_RECV, &in_mr));
	struct rpma_conn_cfg *cfg = cfg_of(qd);
	struct rpma_conn_req *req;
	CHECK(rpma_conn_req_new(peer, addr, port, cfg, &req));
	if (op == OP_SEND)
		CHECK(rpma_conn_req_recv(req, in_mr, 0, size, NULL));
	struct rpma_conn *conn;
	CHECK(rpma_conn_req_connect(&req, NULL, &conn));
	wait_event(conn, RPMA_CONN_ESTABLISHED);
	struct rpma_conn_private_data pd;
	CHECK(rpma_conn_get_private_data(conn, &pd));
	if (pd.len < PDATA_LEN)
		die("the server's private data is too short", 0);
	struct rpma_mr_remote *remote;
	CHECK(rpma_mr_remote_from_descriptor(pd.ptr, 21, &remote));
	struct rpma_peer_cfg *pcfg;
	CHECK(rpma_peer_cfg_from_descriptor((const uint8_t *)pd.ptr + 21, 1, &pcfg));
	CHECK(rpma_conn_apply_remote_peer_cfg(conn, pcfg));
	struct rpma_cq *cq;
	CHECK(rpma_conn_get_cq(conn, &cq));
	struct ibv_wc wc;
	uint64_t *lat = malloc(sizeof(uint64_t) * (size_t)(iters + 1));
	uint64_t *t0 = calloc((size_t)qd, sizeof(uint64_t)); /* post time of each signaled op */
	if (!lat || !t0)
		die("malloc", 0);
	long nlat = 0, measured = 0;
	uint64_t start = 0;
	for (int phase = 0; phase < 2; phase++) {
		long total = phase ? iters : WARMUP, posted = 0, done = 0, inflight = 0, open = 0;
		int head = 0, pending = 0;
		long batch[128];
		if (phase)
			start = now_ns();
		uint64_t last_progress = now_ns();
		while (done < total) {
			if (op == OP_SEND) {
				uint64_t t = now_ns();
				CHECK(post_op(conn, op, mr, remote, 0, size, RPMA_F_COMPLETION_ALWAYS, NULL));
				/* the send's completion and the echo, in either order */
				int sent = 0, echoed = 0;
				while (!sent || !echoed) {
					next_wc(cq, &wc);
					if (wc.opcode == IBV_WC_RECV)
						echoed++;
					else
						sent++;
				}
				CHECK(post_recv(conn, in_mr, size));
				if (phase)
					lat[nlat++] = (now_ns() - t) / 2;
				done++;
				continue;
			}
			while (inflight < qd && posted < total) {
				size_t off = (size_t)(posted % qd) * size;
				int last = posted + 1 == total;
				int sig = last || open + 1 >= (cqmod < qd ? cqmod : qd);
				int tail = (head + pending) % qd;
				if (sig)
					t0[tail] = now_ns();
				CHECK(post_op(conn, op, mr, remote, off, size,
					      sig ? RPMA_F_COMPLETION_ALWAYS : RPMA_F_COMPLETION_ON_ERROR, NULL));
				if (sig) {
					batch[tail] = open + 1;
					pending++;
					open = 0;
				} else {
					open++;
				}
				inflight++;
				posted++;
			}
			if (poll_cq(cq, &wc)) {
				if (phase)
					lat[nlat++] = now_ns() - t0[head];
				inflight -= batch[head];
				done += batch[head];
				head = (head + 1) % qd;
				pending--;
				last_progress = now_ns();
			} else if (now_ns() - last_progress > STALL_NS) {
				die("waiting for a completion (60 s)", 0);
			}
		}
		if (phase)
			measured = done;
	}
	double secs = (double)(now_ns() - start) / 1e9;
	qsort(lat, (size_t)nlat, sizeof(uint64_t), cmp_u64);
	printf("op=%s size=%zu qd=%d ops=%ld elapsed_s=%.6f msg_rate=%.1f p50_ns=%llu posts=%lu polls=%lu\n",
	       opname, size, qd, measured, secs, (double)measured / secs,
	       (unsigned long long)(nlat ? lat[nlat / 2] : 0), posts, polls);
	CHECK(rpma_conn_disconnect(conn));
	wait_event(conn, RPMA_CONN_CLOSED);
	CHECK(rpma_conn_delete(&conn));
	return 0;
}

int main(int argc, char **argv)
{
	rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_ERROR);
	if (argc == 4 && !strcmp(argv[1], "server"))
		return server(argv[2], argv[3]);
	if (argc == 9 && !strcmp(argv[1], "client"))
		return client(argv[2], argv[3], argv[4], strtoul(argv[5], NULL, 0), strtol(argv[6], NULL, 0),
			      atoi(argv[7]), atoi(argv[8]));
	fprintf(stderr, "usage: librpma_bench server ADDR PORT | client ADDR PORT OP SIZE ITERS QD CQMOD\n");
	return 2;
}
