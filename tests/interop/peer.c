/*
 * The C side of the rpma-rs <-> librpma wire-interop test (see README.md next to this file for
 * the protocol). Built by tests/interop.rs with `cc peer.c -lrpma -libverbs -lrdmacm` against
 * the system's C librpma (1.2 on Debian 12) and run in the Soft-RoCE VM.
 *
 *   peer server ADDR PORT    listen, serve one connection, verify every step, exit 0 / 1
 *   peer client ADDR PORT    connect, run every step, exit 0 / 1
 *
 * Every check failure prints "FAIL ..." on stderr and makes the process exit 1; a librpma error
 * does the same. The server prints "LISTENING" on stdout (line buffered) once it listens.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <librpma.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MEM_LEN 4096
#define MSG_LEN 32
#define PDATA_LEN 22 /* MR descriptor (21) + peer-config descriptor (1) */
#define OP_TIMEOUT_MS 60000 /* per completion (TCG guests are slow) */

/* server memory layout */
#define S_W1 0        /* WRITE-VIS lands here, 256 bytes */
#define S_W2 256      /* WRITE-PERS */
#define S_W3 512      /* WRITE-IMM */
#define S_ATOMIC 1024 /* ATOMIC, 8 bytes */
#define S_PS 2048     /* the server's own pattern, read by the client */
/* client memory layout */
#define C_PC 0      /* the client's own pattern, read by the server */
#define C_SW 512    /* the server writes here before RDY */
#define C_STAGE 1024 /* staging of the client's write sources */
#define C_READ 2048 /* the client's read lands here */
#define CHUNK 256

/* pattern tags */
#define T_PC 1
#define T_SW 2
#define T_W1 3
#define T_W2 4
#define T_PS 5
#define T_W3 6
#define T_ATOMIC 7

#define IMM_SEND 0x12345678u
#define IMM_WRITE 0x9abcdef0u

/* RPMA_INTEROP_NO_PERSISTENT=1 (scripts/test-verbs.sh on debian13): librpma 1.3 registers
 * FLUSH_TYPE_PERSISTENT with IBV_ACCESS_FLUSH_PERSISTENT where the device has native flush,
 * which the kernel refuses on memory that is not pmem; the server region then has no
 * persistent usage and WRITE-PERS flushes to visibility (docs/native-ops.md) */
static const char *pmem_path(void)
{
	const char *v = getenv("RPMA_INTEROP_PMEM");
	return v && *v ? v : NULL;
}
static int no_persistent(void)
{
	const char *v = getenv("RPMA_INTEROP_NO_PERSISTENT");
	return !pmem_path() && v && *v && *v != '0';
}
#define USAGE_SERVER (RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_WRITE_DST | \
		      RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY | \
		      (no_persistent() ? 0 : RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT))
/* the expected opcode of a flush: IBV_WC_RDMA_READ (emulated) or IBV_WC_FLUSH (native; 8 in
 * rdma-core 45+, whose headers the Debian 12 build lacks) */
#define WC_ANY_FLUSH (-1)
#define WC_FLUSH_NATIVE 8
#define USAGE_CLIENT (RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_READ_DST | RPMA_MR_USAGE_WRITE_SRC | \
		      RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY)

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

static uint8_t pattern(int tag, size_t i)
{
	return (uint8_t)(tag * 31 + i * 7 + 1);
}

static void fill(uint8_t *p, int tag, size_t len)
{
	for (size_t i = 0; i < len; i++)
		p[i] = pattern(tag, i);
}

/* compares len bytes of got with want; names the first difference */
static void expect_bytes(const char *what, const uint8_t *got, const uint8_t *want, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (got[i] != want[i])
			fail("%s: byte %zu is 0x%02x, expected 0x%02x", what, i, got[i], want[i]);
}

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* checks the raw 22-byte private data of the other side and decodes it */
static void decode_pdata(const struct rpma_conn_private_data *pd, int want_usage, int want_direct,
			 struct rpma_mr_remote **remote, struct rpma_peer_cfg **pcfg)
{
	if (pd->ptr == NULL || pd->len < PDATA_LEN)
		fail("private data: %u bytes, expected at least %d", pd->ptr ? pd->len : 0, PDATA_LEN);
	const uint8_t *b = pd->ptr;
	if (le64(b + 8) != MEM_LEN)
		fail("MR descriptor: size field %llu, expected %d", (unsigned long long)le64(b + 8), MEM_LEN);
	if (b[20] != want_usage)
		fail("MR descriptor: usage byte 0x%02x, expected 0x%02x", b[20], want_usage);
	if (b[21] != want_direct)
		fail("peer-config descriptor: 0x%02x, expected 0x%02x", b[21], want_direct);
	CK(rpma_mr_remote_from_descriptor(b, 21, remote));
	size_t size;
	CK(rpma_mr_remote_get_size(*remote, &size));
	if (size != MEM_LEN)
		fail("remote MR size %zu, expected %d", size, MEM_LEN);
	CK(rpma_peer_cfg_from_descriptor(b + 21, 1, pcfg));
	bool direct;
	CK(rpma_peer_cfg_get_direct_write_to_pmem(*pcfg, &direct));
	if (direct != (bool)want_direct)
		fail("peer config: direct_write_to_pmem %d, expected %d", direct, want_direct);
}

/* our 22-byte private data: the MR descriptor and the peer-config descriptor */
static void encode_pdata(struct rpma_mr_local *mr, bool direct, uint8_t out[PDATA_LEN])
{
	size_t dsz;
	CK(rpma_mr_get_descriptor_size(mr, &dsz));
	if (dsz != 21)
		fail("rpma_mr_get_descriptor_size = %zu, expected 21", dsz);
	CK(rpma_mr_get_descriptor(mr, out));
	struct rpma_peer_cfg *pcfg;
	CK(rpma_peer_cfg_new(&pcfg));
	CK(rpma_peer_cfg_set_direct_write_to_pmem(pcfg, direct));
	CK(rpma_peer_cfg_get_descriptor(pcfg, out + 21));
	CK(rpma_peer_cfg_delete(&pcfg));
}

/* one completion, waiting for it if the CQ is empty; any error status fails */
static struct ibv_wc next_wc(struct rpma_cq *cq)
{
	struct ibv_wc wc;
	int n = 0;
	for (;;) {
		int r = rpma_cq_get_wc(cq, 1, &wc, &n);
		if (r == RPMA_E_NO_COMPLETION) {
			/* bounded: a vanished peer must not leave us blocked forever */
			int fd;
			CK(rpma_cq_get_fd(cq, &fd));
			struct pollfd pfd = {.fd = fd, .events = POLLIN};
			if (poll(&pfd, 1, OP_TIMEOUT_MS) != 1)
				fail("no completion within %d ms", OP_TIMEOUT_MS);
			CK(rpma_cq_wait(cq));
			continue;
		}
		CK(r);
		break;
	}
	if (wc.status != IBV_WC_SUCCESS)
		fail("completion of op %llu: status %s", (unsigned long long)wc.wr_id,
		     ibv_wc_status_str(wc.status));
	return wc;
}

/* waits for the completions of ops 1..n (wr_id = index + 1, any order) with the given opcodes;
 * op atomic_op (0: none) is an atomic write */
static void await_ops_a(struct rpma_cq *cq, int n, const int *opcodes, int atomic_op, struct ibv_wc *out)
{
	int done[8] = {0};
	for (int got = 0; got < n; got++) {
		struct ibv_wc wc = next_wc(cq);
		if (wc.wr_id < 1 || wc.wr_id > (uint64_t)n || done[wc.wr_id - 1])
			fail("unexpected completion of op %llu (opcode %d)", (unsigned long long)wc.wr_id,
			     wc.opcode);
		int want = opcodes[wc.wr_id - 1];
		/* librpma 1.2 uses native atomic write where the device has it */
		int alt = atomic_op == (int)wc.wr_id ? IBV_WC_ATOMIC_WRITE : want;
		if (want == WC_ANY_FLUSH)
			want = alt = (int)wc.opcode == WC_FLUSH_NATIVE ? WC_FLUSH_NATIVE : IBV_WC_RDMA_READ;
		if ((int)wc.opcode != want && (int)wc.opcode != alt)
			fail("op %llu completed with opcode %d, expected %d", (unsigned long long)wc.wr_id,
			     wc.opcode, opcodes[wc.wr_id - 1]);
		done[wc.wr_id - 1] = 1;
		if (out)
			out[wc.wr_id - 1] = wc;
	}
}

static void await_ops(struct rpma_cq *cq, int n, const int *opcodes, struct ibv_wc *out)
{
	await_ops_a(cq, n, opcodes, 0, out);
}

static void expect_event(struct rpma_conn *conn, enum rpma_conn_event want)
{
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	CK(rpma_conn_next_event(conn, &ev));
	if (ev != want)
		fail("connection event %s, expected %s", rpma_utils_conn_event_2str(ev),
		     rpma_utils_conn_event_2str(want));
}

static struct rpma_peer *new_peer(const char *addr, enum rpma_util_ibv_context_type type)
{
	struct ibv_context *ctx = NULL;
	struct rpma_peer *peer;
	CK(rpma_utils_get_ibv_context(addr, type, &ctx));
	if (ctx == NULL)
		fail("no RDMA device for %s", addr);
	CK(rpma_peer_new(ctx, &peer));
	return peer;
}

static void *page(void)
{
	void *p;
	if (posix_memalign(&p, 4096, MEM_LEN))
		fail("out of memory");
	memset(p, 0, MEM_LEN);
	return p;
}

/* RPMA_INTEROP_PMEM=/dev/daxN.M and RPMA_INTEROP_PMEM_OFFSET (a multiple of its 2 MiB
 * alignment): the server's data region on that devdax range (librpma 1.3 registers it with
 * IBV_ACCESS_FLUSH_PERSISTENT where the device has native flush, which the kernel grants on
 * pmem) */
#define PMEM_MAP (2u << 20)
static void *server_mem(void)
{
	const char *path = pmem_path();
	if (!path)
		return page();
	const char *o = getenv("RPMA_INTEROP_PMEM_OFFSET");
	off_t off = o ? (off_t)strtoll(o, NULL, 0) : 0;
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		fail("open %s: %s", path, strerror(errno));
	void *p = mmap(NULL, PMEM_MAP, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);
	if (p == MAP_FAILED)
		fail("mmap %s at %lld: %s", path, (long long)off, strerror(errno));
	close(fd);
	memset(p, 0, MEM_LEN);
	printf("PMEM %s at %lld\n", path, (long long)off);
	return p;
}

/* message buffer: [0, 32) receive slot, [32, 64) send slot */
static void set_msg(uint8_t *msg, const char *text)
{
	size_t len = strlen(text);
	if (len >= MSG_LEN)
		fail("message \"%s\" is too long", text);
	memset(msg + MSG_LEN, 0, MSG_LEN);
	memcpy(msg + MSG_LEN, text, len);
}

/* ------------------------------------------------------------------ server */

static const char *const STEPS[] = {"WRITE-VIS", "WRITE-PERS", "READ", "SEND-IMM", "WRITE-IMM",
				    "ATOMIC", "BYE"};
#define NSTEPS (int)(sizeof(STEPS) / sizeof(STEPS[0]))

static int server(const char *addr, const char *port)
{
	struct rpma_peer *peer = new_peer(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL);
	uint8_t *mem = server_mem(), *scratch = page(), *msg = page(), *expected = page();
	struct rpma_mr_local *mem_mr, *scratch_mr, *msg_mr;
	CK(rpma_mr_reg(peer, mem, MEM_LEN, USAGE_SERVER, &mem_mr));
	CK(rpma_mr_reg(peer, scratch, MEM_LEN, RPMA_MR_USAGE_READ_DST | RPMA_MR_USAGE_WRITE_SRC,
		       &scratch_mr));
	CK(rpma_mr_reg(peer, msg, 2 * MSG_LEN, RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &msg_mr));
	fill(mem + S_PS, T_PS, CHUNK);
	memcpy(expected, mem, MEM_LEN);
	uint8_t pdata_buf[PDATA_LEN];
	encode_pdata(mem_mr, true, pdata_buf);
	struct rpma_conn_private_data pdata = {pdata_buf, PDATA_LEN};

	struct rpma_ep *ep;
	CK(rpma_ep_listen(peer, addr, port, &ep));
	printf("LISTENING\n");
	fflush(stdout);

	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	CK(rpma_ep_next_conn_req(ep, NULL, &req));
	struct rpma_conn_private_data cpd;
	CK(rpma_conn_req_get_private_data(req, &cpd));
	struct rpma_mr_remote *cmem;
	struct rpma_peer_cfg *cpcfg;
	decode_pdata(&cpd, USAGE_CLIENT, 0, &cmem, &cpcfg);
	CK(rpma_conn_req_recv(req, msg_mr, 0, MSG_LEN, (void *)1));
	CK(rpma_conn_req_connect(&req, &pdata, &conn));
	expect_event(conn, RPMA_CONN_ESTABLISHED);
	struct rpma_cq *cq;
	CK(rpma_conn_get_cq(conn, &cq));

	/* RDY: read the client's pattern, write ours into its memory, flush, then tell it */
	fill(scratch + 256, T_SW, CHUNK);
	CK(rpma_read(conn, scratch_mr, 0, cmem, C_PC, CHUNK, RPMA_F_COMPLETION_ALWAYS, (void *)2));
	CK(rpma_write(conn, cmem, C_SW, scratch_mr, 256, CHUNK, RPMA_F_COMPLETION_ON_ERROR, (void *)3));
	CK(rpma_flush(conn, cmem, C_SW, CHUNK, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS,
		      (void *)4));
	int rdy_ops = 0;
	while (rdy_ops < 2) {
		struct ibv_wc wc = next_wc(cq);
		if ((wc.wr_id != 2 && wc.wr_id != 4) ||
		    (wc.opcode != IBV_WC_RDMA_READ && !(wc.wr_id == 4 && wc.opcode == WC_FLUSH_NATIVE)))
			fail("RDY: unexpected completion of op %llu (opcode %d)",
			     (unsigned long long)wc.wr_id, wc.opcode);
		rdy_ops++;
	}
	uint8_t want[CHUNK];
	fill(want, T_PC, CHUNK);
	expect_bytes("RDY: the client's memory as read by the server", scratch, want, CHUNK);
	set_msg(msg, "RDY");
	CK(rpma_send(conn, msg_mr, MSG_LEN, MSG_LEN, RPMA_F_COMPLETION_ALWAYS, (void *)5));
	int sends = 1;

	for (int step = 0; step < NSTEPS; step++) {
		struct ibv_wc wc;
		for (;;) {
			wc = next_wc(cq);
			if (wc.opcode == IBV_WC_SEND && wc.wr_id == 5) {
				sends--;
				continue;
			}
			break;
		}
		if (wc.wr_id != 1)
			fail("step %s: unexpected completion of op %llu (opcode %d)", STEPS[step],
			     (unsigned long long)wc.wr_id, wc.opcode);
		const char *tag;
		char text[MSG_LEN + 1] = {0};
		if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
			tag = "WRITE-IMM";
			if (!(wc.wc_flags & IBV_WC_WITH_IMM) || ntohl(wc.imm_data) != IMM_WRITE)
				fail("WRITE-IMM: imm 0x%08x (flag %d), expected 0x%08x",
				     ntohl(wc.imm_data), !!(wc.wc_flags & IBV_WC_WITH_IMM), IMM_WRITE);
		} else if (wc.opcode == IBV_WC_RECV) {
			if (wc.byte_len != MSG_LEN)
				fail("step %s: message of %u bytes, expected %d", STEPS[step], wc.byte_len,
				     MSG_LEN);
			memcpy(text, msg, MSG_LEN);
			tag = text;
			if (strcmp(tag, "SEND-IMM") == 0) {
				if (!(wc.wc_flags & IBV_WC_WITH_IMM) || ntohl(wc.imm_data) != IMM_SEND)
					fail("SEND-IMM: imm 0x%08x (flag %d), expected 0x%08x",
					     ntohl(wc.imm_data), !!(wc.wc_flags & IBV_WC_WITH_IMM),
					     IMM_SEND);
			} else if (wc.wc_flags & IBV_WC_WITH_IMM) {
				fail("step %s: unexpected imm 0x%08x", tag, ntohl(wc.imm_data));
			}
		} else {
			fail("step %s: unexpected opcode %d", STEPS[step], wc.opcode);
		}
		if (strcmp(tag, STEPS[step]) != 0)
			fail("got step \"%s\", expected \"%s\"", tag, STEPS[step]);
		if (strcmp(tag, "WRITE-VIS") == 0)
			fill(expected + S_W1, T_W1, CHUNK);
		else if (strcmp(tag, "WRITE-PERS") == 0)
			fill(expected + S_W2, T_W2, CHUNK);
		else if (strcmp(tag, "WRITE-IMM") == 0)
			fill(expected + S_W3, T_W3, CHUNK);
		else if (strcmp(tag, "ATOMIC") == 0)
			fill(expected + S_ATOMIC, T_ATOMIC, 8);
		char what[64];
		snprintf(what, sizeof(what), "%s: server memory", tag);
		expect_bytes(what, mem, expected, MEM_LEN);
		printf("c-server: %s ok\n", tag);

		/* a receive for the next step, then the reply (the previous send has completed or
		 * is waited for first, so the send slot is free) */
		while (sends > 0) {
			struct ibv_wc s = next_wc(cq);
			if (s.opcode != IBV_WC_SEND || s.wr_id != 5)
				fail("unexpected completion of op %llu (opcode %d)",
				     (unsigned long long)s.wr_id, s.opcode);
			sends--;
		}
		if (step + 1 < NSTEPS)
			CK(rpma_recv(conn, msg_mr, 0, MSG_LEN, (void *)1));
		char reply[MSG_LEN + 8];
		snprintf(reply, sizeof(reply), "OK %s", tag);
		set_msg(msg, reply);
		CK(rpma_send(conn, msg_mr, MSG_LEN, MSG_LEN, RPMA_F_COMPLETION_ALWAYS, (void *)5));
		sends++;
	}
	while (sends > 0) {
		struct ibv_wc s = next_wc(cq);
		if (s.opcode != IBV_WC_SEND || s.wr_id != 5)
			fail("unexpected completion of op %llu (opcode %d)", (unsigned long long)s.wr_id,
			     s.opcode);
		sends--;
	}
	expect_event(conn, RPMA_CONN_CLOSED);
	CK(rpma_conn_disconnect(conn));
	CK(rpma_conn_delete(&conn));
	CK(rpma_ep_shutdown(&ep));
	CK(rpma_mr_remote_delete(&cmem));
	CK(rpma_peer_cfg_delete(&cpcfg));
	CK(rpma_mr_dereg(&mem_mr));
	CK(rpma_mr_dereg(&scratch_mr));
	CK(rpma_mr_dereg(&msg_mr));
	CK(rpma_peer_delete(&peer));
	printf("c-server: PASS\n");
	return 0;
}

/* ------------------------------------------------------------------ client */

/* sends the step's message (op 2, with imm unless imm == 0) after posting the reply's receive
 * (op 1), and checks the reply; with write_imm the message is a write with imm instead */
static void step_exchange(struct rpma_conn *conn, struct rpma_cq *cq, struct rpma_mr_local *msg_mr,
			  uint8_t *msg, const char *tag, uint32_t imm)
{
	CK(rpma_recv(conn, msg_mr, 0, MSG_LEN, (void *)1));
	set_msg(msg, tag);
	if (imm)
		CK(rpma_send_with_imm(conn, msg_mr, MSG_LEN, MSG_LEN, RPMA_F_COMPLETION_ALWAYS, imm,
				      (void *)2));
	else
		CK(rpma_send(conn, msg_mr, MSG_LEN, MSG_LEN, RPMA_F_COMPLETION_ALWAYS, (void *)2));
	struct ibv_wc wcs[2];
	const int ops[2] = {IBV_WC_RECV, IBV_WC_SEND};
	await_ops(cq, 2, ops, wcs);
	char reply[MSG_LEN + 1] = {0}, want[MSG_LEN + 8];
	memcpy(reply, msg, MSG_LEN);
	snprintf(want, sizeof(want), "OK %s", tag);
	if (wcs[0].byte_len != MSG_LEN || strcmp(reply, want) != 0)
		fail("%s: reply \"%s\" (%u bytes), expected \"%s\"", tag, reply, wcs[0].byte_len, want);
	printf("c-client: %s ok\n", tag);
}

static int client(const char *addr, const char *port)
{
	struct rpma_peer *peer = new_peer(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE);
	uint8_t *mem = page(), *msg = page();
	struct rpma_mr_local *mem_mr, *msg_mr;
	CK(rpma_mr_reg(peer, mem, MEM_LEN, USAGE_CLIENT, &mem_mr));
	CK(rpma_mr_reg(peer, msg, 2 * MSG_LEN, RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &msg_mr));
	fill(mem + C_PC, T_PC, CHUNK);
	uint8_t pdata_buf[PDATA_LEN];
	encode_pdata(mem_mr, false, pdata_buf);
	struct rpma_conn_private_data pdata = {pdata_buf, PDATA_LEN};

	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	CK(rpma_conn_req_new(peer, addr, port, NULL, &req));
	CK(rpma_conn_req_recv(req, msg_mr, 0, MSG_LEN, (void *)1));
	CK(rpma_conn_req_connect(&req, &pdata, &conn));
	expect_event(conn, RPMA_CONN_ESTABLISHED);
	struct rpma_conn_private_data spd;
	CK(rpma_conn_get_private_data(conn, &spd));
	struct rpma_mr_remote *smem;
	struct rpma_peer_cfg *spcfg;
	decode_pdata(&spd, USAGE_SERVER, 1, &smem, &spcfg);
	CK(rpma_conn_apply_remote_peer_cfg(conn, spcfg));
	struct rpma_cq *cq;
	CK(rpma_conn_get_cq(conn, &cq));

	/* RDY */
	struct ibv_wc wc = next_wc(cq);
	char text[MSG_LEN + 1] = {0};
	memcpy(text, msg, MSG_LEN);
	if (wc.wr_id != 1 || wc.opcode != IBV_WC_RECV || wc.byte_len != MSG_LEN ||
	    strcmp(text, "RDY") != 0)
		fail("RDY: op %llu opcode %d, %u bytes \"%s\"", (unsigned long long)wc.wr_id, wc.opcode,
		     wc.byte_len, text);
	uint8_t want[MEM_LEN];
	memset(want, 0, sizeof(want));
	fill(want + C_PC, T_PC, CHUNK);
	fill(want + C_SW, T_SW, CHUNK);
	expect_bytes("RDY: client memory after the server's write", mem, want, MEM_LEN);
	printf("c-client: RDY ok\n");

	const int one_read[1] = {IBV_WC_RDMA_READ};
	const int one_flush[1] = {WC_ANY_FLUSH};
	/* WRITE-VIS: write (completion on error only) + flush to visibility */
	fill(mem + C_STAGE, T_W1, CHUNK);
	CK(rpma_write(conn, smem, S_W1, mem_mr, C_STAGE, CHUNK, RPMA_F_COMPLETION_ON_ERROR, (void *)9));
	CK(rpma_flush(conn, smem, S_W1, CHUNK, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS,
		      (void *)1));
	await_ops(cq, 1, one_flush, NULL);
	step_exchange(conn, cq, msg_mr, msg, "WRITE-VIS", 0);

	/* WRITE-PERS: write + flush to persistence (the server declared direct write to PMem) */
	fill(mem + C_STAGE, T_W2, CHUNK);
	CK(rpma_write(conn, smem, S_W2, mem_mr, C_STAGE, CHUNK, RPMA_F_COMPLETION_ON_ERROR, (void *)9));
	CK(rpma_flush(conn, smem, S_W2, CHUNK,
		      no_persistent() ? RPMA_FLUSH_TYPE_VISIBILITY : RPMA_FLUSH_TYPE_PERSISTENT,
		      RPMA_F_COMPLETION_ALWAYS,
		      (void *)1));
	await_ops(cq, 1, one_flush, NULL);
	step_exchange(conn, cq, msg_mr, msg, "WRITE-PERS", 0);

	/* READ: the server's pattern */
	CK(rpma_read(conn, mem_mr, C_READ, smem, S_PS, CHUNK, RPMA_F_COMPLETION_ALWAYS, (void *)1));
	await_ops(cq, 1, one_read, NULL);
	fill(want, T_PS, CHUNK);
	expect_bytes("READ: the server's pattern", mem + C_READ, want, CHUNK);
	step_exchange(conn, cq, msg_mr, msg, "READ", 0);

	/* SEND-IMM */
	step_exchange(conn, cq, msg_mr, msg, "SEND-IMM", IMM_SEND);

	/* WRITE-IMM: the write with imm is the step's message */
	fill(mem + C_STAGE, T_W3, CHUNK);
	CK(rpma_recv(conn, msg_mr, 0, MSG_LEN, (void *)1));
	CK(rpma_write_with_imm(conn, smem, S_W3, mem_mr, C_STAGE, CHUNK, RPMA_F_COMPLETION_ALWAYS,
			       IMM_WRITE, (void *)2));
	{
		struct ibv_wc wcs[2];
		const int ops[2] = {IBV_WC_RECV, IBV_WC_RDMA_WRITE};
		await_ops(cq, 2, ops, wcs);
		char reply[MSG_LEN + 1] = {0};
		memcpy(reply, msg, MSG_LEN);
		if (strcmp(reply, "OK WRITE-IMM") != 0)
			fail("WRITE-IMM: reply \"%s\"", reply);
		printf("c-client: WRITE-IMM ok\n");
	}

	/* ATOMIC: 8 bytes + flush to visibility */
	char value[8];
	fill((uint8_t *)value, T_ATOMIC, 8);
	CK(rpma_atomic_write(conn, smem, S_ATOMIC, value, RPMA_F_COMPLETION_ALWAYS, (void *)1));
	CK(rpma_flush(conn, smem, S_ATOMIC, 8, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS,
		      (void *)2));
	{
		const int ops[2] = {IBV_WC_RDMA_WRITE, WC_ANY_FLUSH};
		await_ops_a(cq, 2, ops, 1, NULL);
	}
	step_exchange(conn, cq, msg_mr, msg, "ATOMIC", 0);

	step_exchange(conn, cq, msg_mr, msg, "BYE", 0);
	CK(rpma_conn_disconnect(conn));
	expect_event(conn, RPMA_CONN_CLOSED);
	CK(rpma_conn_delete(&conn));
	CK(rpma_mr_remote_delete(&smem));
	CK(rpma_peer_cfg_delete(&spcfg));
	CK(rpma_mr_dereg(&mem_mr));
	CK(rpma_mr_dereg(&msg_mr));
	CK(rpma_peer_delete(&peer));
	printf("c-client: PASS\n");
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	rpma_log_set_threshold(RPMA_LOG_THRESHOLD_AUX, RPMA_LOG_LEVEL_WARNING);
	if (argc != 4 || (strcmp(argv[1], "server") != 0 && strcmp(argv[1], "client") != 0)) {
		fprintf(stderr, "usage: %s server|client ADDR PORT\n", argv[0]);
		return 2;
	}
	role = argv[1];
	return strcmp(role, "server") == 0 ? server(argv[2], argv[3]) : client(argv[2], argv[3]);
}
