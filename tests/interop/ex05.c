/*
 * C peers of the `rpma` scenario flush-to-persistent (the flow of librpma's example 05) with the
 * server's memory on a devdax device, written for rpma-rs against the system's librpma (not
 * librpma's example code). Built by crates/rpma-cli/tests/verbs_scenarios.rs with
 * `cc ex05.c -lrpma -libverbs -lrdmacm` and run in the Soft-RoCE VM (SOFTROCE_PMEM) against
 * `rpma client` / `rpma server --pmem`.
 *
 *   ex05 server05 ADDR PORT DEVDAX OFFSET  maps 2 MiB of DEVDAX at OFFSET, registers its first
 *                                          4096 bytes (WRITE_DST | FLUSH_TYPE_VISIBILITY |
 *                                          FLUSH_TYPE_PERSISTENT: librpma 1.3 asks for
 *                                          IBV_ACCESS_FLUSH_PERSISTENT where the device has native
 *                                          flush), sends struct common_data (data_offset 0, the MR
 *                                          descriptor, the peer config with direct write to PMem),
 *                                          waits for CLOSED and prints "NEW <string>"
 *   ex05 client05 ADDR PORT                writes "Hello from C librpma!" (1024 bytes) at the
 *                                          server's data_offset, flushes them PERSISTENT (as the
 *                                          server's peer configuration allows), checks the
 *                                          completion, disconnects
 *   ex05 stream05 ADDR PORT WAIT [atomic]  client05's write + flush again and again, one at a time
 *                                          (with `atomic`, each followed by an 8-byte atomic write
 *                                          + flush of the same place),
 *                                          for at most 120 s; each completion awaited the way a C
 *                                          application with a deadline does (poll() on
 *                                          rpma_cq_get_fd, then rpma_cq_wait and rpma_cq_get_wc).
 *                                          Prints "STREAMING" at the first completion; then one of
 *                                          "WC <status> after <ms> ms" (an error completion, <ms>
 *                                          since the last good one), "POST <error> after <ms> ms" (a
 *                                          post refused) or "NO COMPLETION in <WAIT> s";
 *                                          "EVENT <event> after <ms> ms" when the connection
 *                                          reports one (while it waits, or within 5 s after), and
 *                                          "DELETED in <ms> ms" once rpma_conn_disconnect and
 *                                          rpma_conn_delete returned.
 *                                          Exits 0 after an error completion or post, 3 after no
 *                                          completion, 4 if the stream was never cut ("STREAMED
 *                                          <n> for 120 s").
 *                                          (scripts/test-cluster.sh part 3: the C library's face of a
 *                                          pulled cable and of a partition.)
 *
 * Any error prints "FAIL ..." on stderr and exits 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <infiniband/verbs.h>
#include <librpma.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define COMMON_DATA_SIZE 28
#define HELLO_STR_SIZE 1024
#define REGION 4096
#define MAP_LEN (2u << 20)
#define RETRIES 100
#define RETRY_DELAY_US 200000
#define C_HELLO "Hello from C librpma!"

static const char *role = "?";

static void fail(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "c-%s: FAIL ", role);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

#define CK(x) do { int r_ = (x); if (r_) fail("%s:%d: %s = %d (%s)", __FILE__, __LINE__, #x, r_, \
					   rpma_err_2str(r_)); } while (0)

static struct rpma_peer *new_peer(const char *addr, enum rpma_util_ibv_context_type type)
{
	struct ibv_context *ctx = NULL;
	struct rpma_peer *peer;
	CK(rpma_utils_get_ibv_context(addr, type, &ctx));
	CK(rpma_peer_new(ctx, &peer));
	return peer;
}

static void expect_event(struct rpma_conn *conn, enum rpma_conn_event want)
{
	enum rpma_conn_event ev;
	CK(rpma_conn_next_event(conn, &ev));
	if (ev != want)
		fail("event %s, expected %s", rpma_utils_conn_event_2str(ev), rpma_utils_conn_event_2str(want));
}

static int server(const char *addr, const char *port, const char *path, const char *offset)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		fail("open %s: %s", path, strerror(errno));
	uint8_t *mem = mmap(NULL, MAP_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
			    (off_t)strtoll(offset, NULL, 0));
	if (mem == MAP_FAILED)
		fail("mmap %s at %s: %s", path, offset, strerror(errno));
	close(fd);
	memset(mem, 0, REGION);
	struct rpma_peer *peer = new_peer(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL);
	struct rpma_mr_local *mr;
	CK(rpma_mr_reg(peer, mem, REGION, RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY |
		       RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT, &mr));
	struct rpma_peer_cfg *pcfg;
	CK(rpma_peer_cfg_new(&pcfg));
	CK(rpma_peer_cfg_set_direct_write_to_pmem(pcfg, true));
	size_t mr_size, pcfg_size;
	CK(rpma_mr_get_descriptor_size(mr, &mr_size));
	CK(rpma_peer_cfg_get_descriptor_size(pcfg, &pcfg_size));
	uint8_t cd[COMMON_DATA_SIZE] = {0};
	uint16_t data_offset = 0;
	memcpy(cd, &data_offset, 2);
	cd[2] = (uint8_t)mr_size;
	cd[3] = (uint8_t)pcfg_size;
	CK(rpma_mr_get_descriptor(mr, cd + 4));
	CK(rpma_peer_cfg_get_descriptor(pcfg, cd + 4 + mr_size));
	struct rpma_conn_private_data pd = {cd, COMMON_DATA_SIZE};
	struct rpma_ep *ep;
	CK(rpma_ep_listen(peer, addr, port, &ep));
	printf("LISTENING\n");
	fflush(stdout);
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	CK(rpma_ep_next_conn_req(ep, NULL, &req));
	CK(rpma_conn_req_connect(&req, &pd, &conn));
	expect_event(conn, RPMA_CONN_ESTABLISHED);
	expect_event(conn, RPMA_CONN_CLOSED);
	CK(rpma_conn_disconnect(conn));
	CK(rpma_conn_delete(&conn));
	mem[HELLO_STR_SIZE - 1] = 0;
	printf("NEW %s\n", (char *)mem);
	CK(rpma_ep_shutdown(&ep));
	CK(rpma_mr_dereg(&mr));
	CK(rpma_peer_cfg_delete(&pcfg));
	CK(rpma_peer_delete(&peer));
	munmap(mem, MAP_LEN);
	return 0;
}

/* client05's connection: the server's region and the flush type its peer configuration allows */
struct link05 {
	struct rpma_peer *peer;
	uint8_t *src;
	struct rpma_mr_local *src_mr;
	struct rpma_conn *conn;
	struct rpma_mr_remote *dst;
	uint16_t data_offset;
	enum rpma_flush_type flush;
};

static void connect05(const char *addr, const char *port, struct link05 *l)
{
	struct rpma_peer *peer = new_peer(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE);
	uint8_t *src;
	if (posix_memalign((void **)&src, 4096, HELLO_STR_SIZE))
		fail("out of memory");
	memset(src, 0, HELLO_STR_SIZE);
	strcpy((char *)src, C_HELLO);
	struct rpma_mr_local *src_mr;
	CK(rpma_mr_reg(peer, src, HELLO_STR_SIZE, RPMA_MR_USAGE_WRITE_SRC, &src_mr));
	struct rpma_conn *conn = NULL;
	for (int attempt = 0;; attempt++) {
		struct rpma_conn_req *req;
		enum rpma_conn_event ev;
		CK(rpma_conn_req_new(peer, addr, port, NULL, &req));
		CK(rpma_conn_req_connect(&req, NULL, &conn));
		CK(rpma_conn_next_event(conn, &ev));
		if (ev == RPMA_CONN_ESTABLISHED)
			break;
		if ((ev != RPMA_CONN_REJECTED && ev != RPMA_CONN_UNREACHABLE) || attempt >= RETRIES)
			fail("connecting: event %s", rpma_utils_conn_event_2str(ev));
		CK(rpma_conn_delete(&conn));
		usleep(RETRY_DELAY_US);
	}
	struct rpma_conn_private_data pd;
	CK(rpma_conn_get_private_data(conn, &pd));
	if (pd.len < COMMON_DATA_SIZE)
		fail("private data of %u bytes", pd.len);
	const uint8_t *cd = pd.ptr;
	uint16_t data_offset;
	memcpy(&data_offset, cd, 2);
	struct rpma_mr_remote *dst;
	CK(rpma_mr_remote_from_descriptor(cd + 4, cd[2], &dst));
	enum rpma_flush_type flush = RPMA_FLUSH_TYPE_VISIBILITY;
	if (cd[3]) {
		struct rpma_peer_cfg *pcfg;
		bool direct;
		CK(rpma_peer_cfg_from_descriptor(cd + 4 + cd[2], cd[3], &pcfg));
		CK(rpma_peer_cfg_get_direct_write_to_pmem(pcfg, &direct));
		CK(rpma_conn_apply_remote_peer_cfg(conn, pcfg));
		CK(rpma_peer_cfg_delete(&pcfg));
		if (direct)
			flush = RPMA_FLUSH_TYPE_PERSISTENT;
	}
	*l = (struct link05){peer, src, src_mr, conn, dst, data_offset, flush};
}

static void release05(struct link05 *l)
{
	CK(rpma_mr_remote_delete(&l->dst));
	CK(rpma_mr_dereg(&l->src_mr));
	CK(rpma_peer_delete(&l->peer));
	free(l->src);
}

static int client(const char *addr, const char *port)
{
	struct link05 l;
	connect05(addr, port, &l);
	struct rpma_conn *conn = l.conn;
	enum rpma_flush_type flush = l.flush;
	CK(rpma_write(conn, l.dst, l.data_offset, l.src_mr, 0, HELLO_STR_SIZE, RPMA_F_COMPLETION_ON_ERROR, NULL));
	CK(rpma_flush(conn, l.dst, l.data_offset, HELLO_STR_SIZE, flush, RPMA_F_COMPLETION_ALWAYS,
		      (void *)5));
	struct rpma_cq *cq;
	struct ibv_wc wc;
	CK(rpma_conn_get_cq(conn, &cq));
	CK(rpma_cq_wait(cq));
	CK(rpma_cq_get_wc(cq, 1, &wc, NULL));
	if (wc.status != IBV_WC_SUCCESS || wc.wr_id != 5)
		fail("flush completion: status %s, wr_id %llu", ibv_wc_status_str(wc.status),
		     (unsigned long long)wc.wr_id);
	printf("FLUSHED %s opcode %d\n", flush == RPMA_FLUSH_TYPE_PERSISTENT ? "PERSISTENT" : "VISIBILITY",
	       (int)wc.opcode);
	CK(rpma_conn_disconnect(conn));
	expect_event(conn, RPMA_CONN_CLOSED);
	CK(rpma_conn_delete(&conn));
	release05(&l);
	return 0;
}

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* waits up to ms for fd a or fd b to be readable: bit 0 set if a is, bit 1 if b is */
static int readable(int a, int b, double ms)
{
	struct pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
	int r = poll(p, 2, ms > 0 ? (int)ms : 0);
	if (r < 0 && errno != EINTR)
		fail("poll: %s", strerror(errno));
	return r > 0 ? ((p[0].revents & POLLIN) ? 1 : 0) | ((p[1].revents & POLLIN) ? 2 : 0) : 0;
}

/* reads the connection's next event and prints it with the time since the last good completion */
static void report_event(struct rpma_conn *conn, double last, int *events)
{
	enum rpma_conn_event ev;
	CK(rpma_conn_next_event(conn, &ev));
	printf("EVENT %s after %.0f ms\n", rpma_utils_conn_event_2str(ev), now_ms() - last);
	fflush(stdout);
	(*events)++;
}

/* awaits the next completion on cq for at most `wait` ms since `*last`: 0 with *wc filled, 3
 * after "NO COMPLETION" was printed; connection events are reported as they come */
static int await_wc(struct link05 *l, struct rpma_cq *cq, int cq_fd, int ev_fd, double wait,
		    const char *wait_s, const double *last, int *events, unsigned long n, struct ibv_wc *wc)
{
	for (;;) {
		int r = rpma_cq_get_wc(cq, 1, wc, NULL);
		if (r == 0)
			return 0;
		if (r != RPMA_E_NO_COMPLETION)
			CK(r);
		double left = wait - (now_ms() - *last);
		if (left <= 0) {
			printf("NO COMPLETION in %s s (%lu flushed before)\n", wait_s, n);
			return 3;
		}
		/* the CQ is armed (rpma_cq_wait re-arms it): a completion makes cq_fd readable;
		 * a connection event (if any comes) is reported when it comes */
		int ready = readable(cq_fd, *events ? -1 : ev_fd, left);
		if (ready & 2)
			report_event(l->conn, *last, events);
		if (ready & 1)
			CK(rpma_cq_wait(cq));
	}
}

static int stream(const char *addr, const char *port, const char *wait_s, int atomic)
{
	double wait = strtod(wait_s, NULL) * 1e3;
	struct link05 l;
	connect05(addr, port, &l);
	struct rpma_cq *cq;
	int cq_fd, ev_fd, rc = 4, events = 0;
	CK(rpma_conn_get_cq(l.conn, &cq));
	CK(rpma_cq_get_fd(cq, &cq_fd));
	CK(rpma_conn_get_event_fd(l.conn, &ev_fd));
	double start = now_ms(), last = start;
	unsigned long n = 0;
	struct ibv_wc wc;
	static const char word[RPMA_ATOMIC_WRITE_ALIGNMENT] = "01234567";
	while (rc == 4 && now_ms() - start < 120e3) {
		/* write + flush; with `atomic`, then an 8-byte atomic write + flush, each flush's
		 * completion awaited before the next post */
		for (int step = 0; step < (atomic ? 2 : 1) && rc == 4; step++) {
			int p = step == 0 ? rpma_write(l.conn, l.dst, l.data_offset, l.src_mr, 0, HELLO_STR_SIZE,
						       RPMA_F_COMPLETION_ON_ERROR, NULL)
					  : rpma_atomic_write(l.conn, l.dst, l.data_offset, word,
							      RPMA_F_COMPLETION_ON_ERROR, NULL);
			if (!p)
				p = rpma_flush(l.conn, l.dst, l.data_offset, step == 0 ? HELLO_STR_SIZE : sizeof(word),
					       l.flush, RPMA_F_COMPLETION_ALWAYS, (void *)(uintptr_t)n);
			if (p) {
				printf("POST %s after %.0f ms (%lu flushed before)\n", rpma_err_2str(p),
				       now_ms() - last, n);
				rc = 0;
				break;
			}
			if (await_wc(&l, cq, cq_fd, ev_fd, wait, wait_s, &last, &events, n, &wc)) {
				rc = 3;
				break;
			}
			if (wc.status != IBV_WC_SUCCESS) {
				printf("WC %s after %.0f ms (%lu flushed before)\n", ibv_wc_status_str(wc.status),
				       now_ms() - last, n);
				rc = 0;
				break;
			}
			last = now_ms();
		}
		if (rc != 4)
			break;
		if (n++ == 0) {
			printf("STREAMING\n");
			fflush(stdout);
		}
	}
	if (!events && readable(-1, ev_fd, 5e3))
		report_event(l.conn, last, &events);
	if (rc == 4)
		printf("STREAMED %lu for 120 s\n", n);
	double cut = now_ms();
	int r = rpma_conn_disconnect(l.conn);
	if (r)
		printf("rpma_conn_disconnect: %s\n", rpma_err_2str(r));
	CK(rpma_conn_delete(&l.conn));
	printf("DELETED in %.0f ms\n", now_ms() - cut);
	release05(&l);
	return rc;
}

int main(int argc, char *argv[])
{
	if (argc == 6 && strcmp(argv[1], "server05") == 0) {
		role = "server05";
		return server(argv[2], argv[3], argv[4], argv[5]);
	}
	if (argc == 4 && strcmp(argv[1], "client05") == 0) {
		role = "client05";
		return client(argv[2], argv[3]);
	}
	if ((argc == 5 || (argc == 6 && strcmp(argv[5], "atomic") == 0)) && strcmp(argv[1], "stream05") == 0) {
		role = "stream05";
		return stream(argv[2], argv[3], argv[4], argc == 6);
	}
	fprintf(stderr, "usage: %s server05 ADDR PORT DEVDAX OFFSET | client05 ADDR PORT | stream05 ADDR PORT WAIT [atomic]\n",
		argv[0]);
	return 2;
}
