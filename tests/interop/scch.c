/*
 * C peers of the `rpma` scenarios with a shared completion channel (librpma's examples 06scch
 * and 09scch), written for rpma-rs against the system's librpma (not librpma's example code).
 * Built by crates/rpma-cli/tests/verbs_scenarios.rs with `cc scch.c -lrpma -libverbs -lrdmacm`
 * and run in the Soft-RoCE VM against `rpma server` / `rpma client` (see README.md here).
 *
 *   scch server06 ADDR PORT N     06scch server: N connections in arrival order; per connection
 *                                 reads the client's 32-byte name into slot i, prints
 *                                 "NAME i HEX32", disconnects
 *   scch client06 ADDR PORT NAME  06 client: exposes NAME (32 bytes, READ_SRC), waits for CLOSED
 *   scch server09 ADDR PORT       09scch server (DRAM, data_offset 0): prints "REQUEST HEX" (the
 *                                 flush request's bytes) and "DATA HEX1024" (what the client
 *                                 wrote), replies GPSPM_flush_response{op_context}
 *   scch client09 ADDR PORT       09scch client: writes its hello string, sends the flush
 *                                 request, prints "RESPONSE HEX" (the response's bytes)
 *
 * Every connection has a shared completion channel (rpma_conn_cfg_set_compl_channel) and its
 * completions are waited for with rpma_conn_wait. Any error prints "FAIL ..." on stderr and
 * exits 1. Servers print "LISTENING" once they listen; clients retry a rejected or unreachable
 * connection (the server may not listen yet).
 */
#include <infiniband/verbs.h>
#include <librpma.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* struct common_data of the scenarios (crates/rpma-cli/src/pdata.rs), native byte order */
#define COMMON_DATA_SIZE 28
#define MR_DESC_SIZE 21
/* 06 */
#define MAX_NAME_SIZE 32
#define CLIENT_MAX 10
/* 09 */
#define HELLO_STR_SIZE 1024
#define HELLO_STR_OFFSET 4
#define HELLO_T_SIZE (HELLO_STR_OFFSET + HELLO_STR_SIZE)
#define MSG_SIZE_MAX 512
#define SEND_OFFSET 0
#define RECV_OFFSET MSG_SIZE_MAX
#define RCQ_SIZE 1
#define FLUSH_ID 0xF01DULL

#define RETRIES 100
#define RETRY_DELAY_US 200000

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

static void *alloc_zeroed(size_t len)
{
	void *p;
	if (posix_memalign(&p, 4096, len))
		fail("posix_memalign(%zu)", len);
	memset(p, 0, len);
	return p;
}

static void print_hex(const char *tag, const uint8_t *p, size_t len)
{
	printf("%s", tag);
	for (size_t i = 0; i < len; i++)
		printf("%s%02x", i ? "" : " ", p[i]);
	printf("\n");
}

static void encode_common_data(uint16_t data_offset, struct rpma_mr_local *mr, uint8_t out[COMMON_DATA_SIZE])
{
	size_t size;
	memset(out, 0, COMMON_DATA_SIZE);
	memcpy(out, &data_offset, 2);
	CK(rpma_mr_get_descriptor_size(mr, &size));
	if (size != MR_DESC_SIZE)
		fail("MR descriptor size %zu, expected %d", size, MR_DESC_SIZE);
	out[2] = MR_DESC_SIZE;
	out[3] = 0;
	CK(rpma_mr_get_descriptor(mr, out + 4));
}

/* the other side's common_data: its MR and data_offset */
static struct rpma_mr_remote *decode_common_data(struct rpma_conn *conn, uint16_t *data_offset)
{
	struct rpma_conn_private_data pd;
	CK(rpma_conn_get_private_data(conn, &pd));
	if (pd.ptr == NULL || pd.len < COMMON_DATA_SIZE)
		fail("private data: %u bytes, expected at least %d", pd.ptr ? pd.len : 0, COMMON_DATA_SIZE);
	const uint8_t *b = pd.ptr;
	if (b[2] != MR_DESC_SIZE || b[3] != 0)
		fail("common_data: descriptor sizes %u + %u, expected %d + 0", b[2], b[3], MR_DESC_SIZE);
	memcpy(data_offset, b, 2);
	struct rpma_mr_remote *mr;
	CK(rpma_mr_remote_from_descriptor(b + 4, MR_DESC_SIZE, &mr));
	return mr;
}

static void expect_event(struct rpma_conn *conn, enum rpma_conn_event want)
{
	enum rpma_conn_event ev;
	CK(rpma_conn_next_event(conn, &ev));
	if (ev != want)
		fail("connection event %s, expected %s", rpma_utils_conn_event_2str(ev),
		     rpma_utils_conn_event_2str(want));
}

static struct rpma_conn_cfg *shared_cfg(uint32_t rcq_size)
{
	struct rpma_conn_cfg *cfg;
	CK(rpma_conn_cfg_new(&cfg));
	CK(rpma_conn_cfg_set_compl_channel(cfg, true));
	if (rcq_size)
		CK(rpma_conn_cfg_set_rcq_size(cfg, rcq_size));
	return cfg;
}

/*
 * The next completion of the connection, waited for on its shared completion channel
 * (rpma_conn_wait); checks that it came from the expected CQ, its status and its opcode.
 */
static struct ibv_wc next_wc(struct rpma_conn *conn, bool want_rcq, enum ibv_wc_opcode opcode)
{
	struct rpma_cq *cqs[2] = {NULL, NULL};
	CK(rpma_conn_get_cq(conn, &cqs[0]));
	if (rpma_conn_get_rcq(conn, &cqs[1]))
		cqs[1] = NULL;
	struct ibv_wc wc;
	int got = 0;
	bool is_rcq = false;
	for (int i = 0; i < 2 && !got; i++) {
		if (cqs[i] == NULL)
			continue;
		int r = rpma_cq_get_wc(cqs[i], 1, &wc, &got);
		if (r && r != RPMA_E_NO_COMPLETION)
			CK(r);
		if (r == RPMA_E_NO_COMPLETION)
			got = 0;
		is_rcq = i == 1;
	}
	while (!got) {
		struct rpma_cq *cq;
		CK(rpma_conn_wait(conn, 0, &cq, &is_rcq));
		int r = rpma_cq_get_wc(cq, 1, &wc, &got);
		if (r == RPMA_E_NO_COMPLETION)
			got = 0;
		else
			CK(r);
	}
	if (wc.status != IBV_WC_SUCCESS)
		fail("completion status %s", ibv_wc_status_str(wc.status));
	if (wc.opcode != opcode)
		fail("completion opcode %d, expected %d", wc.opcode, opcode);
	if (is_rcq != want_rcq)
		fail("completion (opcode %d) on the %s CQ", wc.opcode, is_rcq ? "receive" : "main");
	return wc;
}

static struct rpma_peer *new_peer(const char *addr, enum rpma_util_ibv_context_type type)
{
	struct ibv_context *dev;
	struct rpma_peer *peer;
	CK(rpma_utils_get_ibv_context(addr, type, &dev));
	CK(rpma_peer_new(dev, &peer));
	return peer;
}

static struct rpma_ep *listen_on(struct rpma_peer *peer, const char *addr, const char *port)
{
	struct rpma_ep *ep;
	CK(rpma_ep_listen(peer, addr, port, &ep));
	printf("LISTENING\n");
	fflush(stdout);
	return ep;
}

/* connects (retrying a rejected or unreachable request) and waits for ESTABLISHED */
static struct rpma_conn *connect_to(struct rpma_peer *peer, const char *addr, const char *port,
				    struct rpma_conn_cfg *cfg, const uint8_t *pdata, size_t pdata_len)
{
	struct rpma_conn_private_data pd = {(void *)pdata, (uint8_t)pdata_len};
	for (int attempt = 0;; attempt++) {
		struct rpma_conn_req *req;
		struct rpma_conn *conn;
		enum rpma_conn_event ev;
		CK(rpma_conn_req_new(peer, addr, port, cfg, &req));
		CK(rpma_conn_req_connect(&req, pdata ? &pd : NULL, &conn));
		CK(rpma_conn_next_event(conn, &ev));
		if (ev == RPMA_CONN_ESTABLISHED)
			return conn;
		if ((ev != RPMA_CONN_REJECTED && ev != RPMA_CONN_UNREACHABLE) || attempt >= RETRIES)
			fail("connecting: event %s", rpma_utils_conn_event_2str(ev));
		CK(rpma_conn_delete(&conn));
		usleep(RETRY_DELAY_US);
	}
}

static void disconnect_and_wait_close(struct rpma_conn *conn)
{
	CK(rpma_conn_disconnect(conn));
	expect_event(conn, RPMA_CONN_CLOSED);
	CK(rpma_conn_delete(&conn));
}

static void wait_close_and_disconnect(struct rpma_conn *conn)
{
	expect_event(conn, RPMA_CONN_CLOSED);
	CK(rpma_conn_disconnect(conn));
	CK(rpma_conn_delete(&conn));
}

/* ------------------------------------------------------------------ 06scch */

static void server06(const char *addr, const char *port, int n)
{
	if (n < 1 || n > CLIENT_MAX)
		fail("N must be 1 to %d", CLIENT_MAX);
	struct rpma_peer *peer = new_peer(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL);
	struct rpma_ep *ep = listen_on(peer, addr, port);
	uint8_t *dst = alloc_zeroed(MAX_NAME_SIZE * CLIENT_MAX);
	struct rpma_mr_local *dst_mr;
	CK(rpma_mr_reg(peer, dst, MAX_NAME_SIZE * CLIENT_MAX, RPMA_MR_USAGE_READ_DST, &dst_mr));
	struct rpma_conn_cfg *cfg = shared_cfg(0);
	for (int slot = 0; slot < n; slot++) {
		struct rpma_conn_req *req;
		struct rpma_conn *conn;
		CK(rpma_ep_next_conn_req(ep, cfg, &req));
		CK(rpma_conn_req_connect(&req, NULL, &conn));
		expect_event(conn, RPMA_CONN_ESTABLISHED);
		uint16_t data_offset;
		struct rpma_mr_remote *src = decode_common_data(conn, &data_offset);
		size_t size;
		CK(rpma_mr_remote_get_size(src, &size));
		if (size < MAX_NAME_SIZE)
			fail("slot %d: the client's region is %zu bytes, expected at least %d", slot, size,
			     MAX_NAME_SIZE);
		CK(rpma_read(conn, dst_mr, (size_t)slot * MAX_NAME_SIZE, src, 0, MAX_NAME_SIZE,
			     RPMA_F_COMPLETION_ALWAYS, (void *)(uintptr_t)slot));
		struct ibv_wc wc = next_wc(conn, false, IBV_WC_RDMA_READ);
		if (wc.wr_id != (uint64_t)slot)
			fail("read completion wr_id %llu, expected %d", (unsigned long long)wc.wr_id, slot);
		char tag[16];
		snprintf(tag, sizeof(tag), "NAME %d", slot);
		print_hex(tag, dst + slot * MAX_NAME_SIZE, MAX_NAME_SIZE);
		fflush(stdout);
		CK(rpma_mr_remote_delete(&src));
		disconnect_and_wait_close(conn);
	}
	CK(rpma_conn_cfg_delete(&cfg));
	CK(rpma_mr_dereg(&dst_mr));
	free(dst);
	CK(rpma_ep_shutdown(&ep));
	CK(rpma_peer_delete(&peer));
}

static void client06(const char *addr, const char *port, const char *name)
{
	struct rpma_peer *peer = new_peer(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE);
	uint8_t *src = alloc_zeroed(MAX_NAME_SIZE);
	strncpy((char *)src, name, MAX_NAME_SIZE - 1);
	struct rpma_mr_local *mr;
	CK(rpma_mr_reg(peer, src, MAX_NAME_SIZE, RPMA_MR_USAGE_READ_SRC, &mr));
	uint8_t pdata[COMMON_DATA_SIZE];
	encode_common_data(0, mr, pdata);
	struct rpma_conn_cfg *cfg = shared_cfg(0);
	struct rpma_conn *conn = connect_to(peer, addr, port, cfg, pdata, sizeof(pdata));
	wait_close_and_disconnect(conn);
	print_hex("EXPOSED", src, MAX_NAME_SIZE);
	CK(rpma_conn_cfg_delete(&cfg));
	CK(rpma_mr_dereg(&mr));
	free(src);
	CK(rpma_peer_delete(&peer));
}

/* ------------------------------------------------------------------ 09scch */

/* protobuf: field `field` of wire type fixed64 */
static size_t put_fixed64(uint8_t *out, int field, uint64_t v)
{
	out[0] = (uint8_t)(field << 3 | 1);
	for (int i = 0; i < 8; i++)
		out[1 + i] = (uint8_t)(v >> (8 * i));
	return 9;
}

/* the fixed64 field `field` of a packed message (other fields skipped); 0 if missing */
static int get_fixed64(const uint8_t *msg, size_t len, int field, uint64_t *v)
{
	size_t i = 0;
	int found = 0;
	while (i < len) {
		uint64_t key = 0;
		int shift = 0;
		for (;;) {
			if (i >= len || shift > 63)
				fail("malformed protobuf message");
			key |= (uint64_t)(msg[i] & 0x7f) << shift;
			shift += 7;
			if (!(msg[i++] & 0x80))
				break;
		}
		int wire = (int)(key & 7);
		if (wire != 1)
			fail("protobuf: wire type %d (only fixed64 expected)", wire);
		if (i + 8 > len)
			fail("protobuf: truncated fixed64");
		if ((int)(key >> 3) == field) {
			*v = 0;
			for (int b = 7; b >= 0; b--)
				*v = *v << 8 | msg[i + b];
			found = 1;
		}
		i += 8;
	}
	return found;
}

static void server09(const char *addr, const char *port)
{
	struct rpma_peer *peer = new_peer(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL);
	struct rpma_ep *ep = listen_on(peer, addr, port);
	uint8_t *mem = alloc_zeroed(HELLO_STR_SIZE);
	struct rpma_mr_local *mem_mr;
	CK(rpma_mr_reg(peer, mem, HELLO_STR_SIZE, RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY,
		       &mem_mr));
	uint8_t *msg = alloc_zeroed(HELLO_STR_SIZE);
	struct rpma_mr_local *msg_mr;
	CK(rpma_mr_reg(peer, msg, HELLO_STR_SIZE, RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &msg_mr));
	uint8_t pdata[COMMON_DATA_SIZE];
	encode_common_data(0, mem_mr, pdata);
	struct rpma_conn_private_data pd = {pdata, sizeof(pdata)};
	struct rpma_conn_cfg *cfg = shared_cfg(RCQ_SIZE);
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	CK(rpma_ep_next_conn_req(ep, cfg, &req));
	CK(rpma_conn_req_recv(req, msg_mr, RECV_OFFSET, MSG_SIZE_MAX, NULL));
	CK(rpma_conn_req_connect(&req, &pd, &conn));
	expect_event(conn, RPMA_CONN_ESTABLISHED);

	struct ibv_wc wc = next_wc(conn, true, IBV_WC_RECV);
	if (wc.byte_len > MSG_SIZE_MAX)
		fail("flush request of %u bytes", wc.byte_len);
	const uint8_t *rq = msg + RECV_OFFSET;
	print_hex("REQUEST", rq, wc.byte_len);
	uint64_t offset, length, op_context;
	if (!get_fixed64(rq, wc.byte_len, 1, &offset) || !get_fixed64(rq, wc.byte_len, 2, &length) ||
	    !get_fixed64(rq, wc.byte_len, 3, &op_context))
		fail("flush request without a required field");
	if (offset > HELLO_STR_SIZE || length > HELLO_STR_SIZE - offset)
		fail("flush request outside the region: offset %llu length %llu", (unsigned long long)offset,
		     (unsigned long long)length);
	/* DRAM: nothing to persist (the C example would pmem_persist the range) */
	print_hex("DATA", mem + offset, (size_t)length);
	fflush(stdout);

	size_t n = put_fixed64(msg + SEND_OFFSET, 1, op_context);
	CK(rpma_send(conn, msg_mr, SEND_OFFSET, n, RPMA_F_COMPLETION_ALWAYS, NULL));
	next_wc(conn, false, IBV_WC_SEND);
	wait_close_and_disconnect(conn);

	CK(rpma_conn_cfg_delete(&cfg));
	CK(rpma_mr_dereg(&mem_mr));
	CK(rpma_mr_dereg(&msg_mr));
	free(mem);
	free(msg);
	CK(rpma_ep_shutdown(&ep));
	CK(rpma_peer_delete(&peer));
}

static void client09(const char *addr, const char *port)
{
	struct rpma_peer *peer = new_peer(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE);
	/* struct hello_t { enum lang_t lang; char str[1024]; } in English */
	uint8_t *hello = alloc_zeroed(HELLO_T_SIZE);
	strcpy((char *)hello + HELLO_STR_OFFSET, "Hello world!");
	struct rpma_mr_local *src_mr;
	CK(rpma_mr_reg(peer, hello, HELLO_T_SIZE, RPMA_MR_USAGE_WRITE_SRC, &src_mr));
	uint8_t *msg = alloc_zeroed(HELLO_STR_SIZE);
	struct rpma_mr_local *msg_mr;
	CK(rpma_mr_reg(peer, msg, HELLO_STR_SIZE, RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &msg_mr));
	struct rpma_conn_cfg *cfg = shared_cfg(RCQ_SIZE);
	struct rpma_conn *conn = connect_to(peer, addr, port, cfg, NULL, 0);

	uint16_t data_offset;
	struct rpma_mr_remote *dst = decode_common_data(conn, &data_offset);
	size_t size;
	CK(rpma_mr_remote_get_size(dst, &size));
	if (size < data_offset || size - data_offset < HELLO_STR_SIZE)
		fail("the server's region (%zu bytes, data at %u) is too small", size, data_offset);
	CK(rpma_write(conn, dst, data_offset, src_mr, HELLO_STR_OFFSET, HELLO_STR_SIZE,
		      RPMA_F_COMPLETION_ON_ERROR, NULL));
	CK(rpma_recv(conn, msg_mr, RECV_OFFSET, MSG_SIZE_MAX, NULL));
	size_t n = put_fixed64(msg + SEND_OFFSET, 1, data_offset);
	n += put_fixed64(msg + SEND_OFFSET + n, 2, HELLO_STR_SIZE);
	n += put_fixed64(msg + SEND_OFFSET + n, 3, FLUSH_ID);
	CK(rpma_send(conn, msg_mr, SEND_OFFSET, n, RPMA_F_COMPLETION_ALWAYS, NULL));
	next_wc(conn, false, IBV_WC_SEND);
	struct ibv_wc wc = next_wc(conn, true, IBV_WC_RECV);
	if (wc.byte_len > MSG_SIZE_MAX)
		fail("flush response of %u bytes", wc.byte_len);
	print_hex("RESPONSE", msg + RECV_OFFSET, wc.byte_len);
	uint64_t op_context;
	if (!get_fixed64(msg + RECV_OFFSET, wc.byte_len, 1, &op_context))
		fail("flush response without op_context");
	if (op_context != FLUSH_ID)
		fail("op_context 0x%llx, expected 0x%llx", (unsigned long long)op_context, FLUSH_ID);
	fflush(stdout);
	disconnect_and_wait_close(conn);

	CK(rpma_mr_remote_delete(&dst));
	CK(rpma_conn_cfg_delete(&cfg));
	CK(rpma_mr_dereg(&src_mr));
	CK(rpma_mr_dereg(&msg_mr));
	free(hello);
	free(msg);
	CK(rpma_peer_delete(&peer));
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 4)
		goto usage;
	role = argv[1];
	if (!strcmp(role, "server06") && argc == 5)
		server06(argv[2], argv[3], atoi(argv[4]));
	else if (!strcmp(role, "client06") && argc == 5)
		client06(argv[2], argv[3], argv[4]);
	else if (!strcmp(role, "server09") && argc == 4)
		server09(argv[2], argv[3]);
	else if (!strcmp(role, "client09") && argc == 4)
		client09(argv[2], argv[3]);
	else
		goto usage;
	return 0;
usage:
	fprintf(stderr, "usage: scch server06 ADDR PORT N | client06 ADDR PORT NAME | server09 ADDR PORT | "
			"client09 ADDR PORT\n");
	return 2;
}
