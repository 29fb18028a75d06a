/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Bad arguments on RPMA_BACKEND=mock (and verbs): every NULL and invalid value gets librpma's code,
 * out-parameters stay untouched on failure, deletes NULL the caller's pointer and a second
 * delete is a no-op. Plus the string functions, logging, the defaults of a connection
 * configuration and a shared completion channel. One thread: the mock connects a request
 * before the server takes it.
 */
#include <stdarg.h>
#include <stdint.h>
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
#define PORT test_port("7312")
#define SENTINEL ((void *)0x5a5a)

static int logged;
static char last_log[256];

static void log_fn(enum rpma_log_level level, const char *file, const int line,
	const char *func, const char *fmt, ...)
{
	(void)level;
	(void)line;
	EXPECT(file != NULL && func != NULL);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_log, sizeof(last_log), fmt, ap);
	va_end(ap);
	logged++;
}

static void strings(void)
{
	EXPECT(strcmp(rpma_err_2str(0), "Success") == 0);
	EXPECT(strcmp(rpma_err_2str(RPMA_E_INVAL), "Invalid argument") == 0);
	EXPECT(strcmp(rpma_err_2str(RPMA_E_AGAIN), "Temporary error, try again") == 0);
	EXPECT(strcmp(rpma_err_2str(RPMA_E_NOT_SHARED_CHNL), "Completion channel is not shared") == 0);
	EXPECT(strcmp(rpma_err_2str(RPMA_E_UNKNOWN), "Unknown error") == 0);
	EXPECT(strcmp(rpma_err_2str(12345), "Unknown error") == 0);
	EXPECT(strcmp(rpma_utils_conn_event_2str(RPMA_CONN_CLOSED), "Connection closed") == 0);
	EXPECT(strcmp(rpma_utils_conn_event_2str(RPMA_CONN_UNREACHABLE), "Connection unreachable") == 0);
	EXPECT(strcmp(rpma_utils_conn_event_2str(77), "Unsupported connection event") == 0);
}

static void logging(void)
{
	enum rpma_log_level level = (enum rpma_log_level)99;
	INVAL(rpma_log_set_threshold(RPMA_LOG_THRESHOLD_MAX, RPMA_LOG_LEVEL_ERROR));
	INVAL(rpma_log_set_threshold(RPMA_LOG_THRESHOLD, (enum rpma_log_level)6));
	INVAL(rpma_log_set_threshold(RPMA_LOG_THRESHOLD, (enum rpma_log_level)-2));
	INVAL(rpma_log_get_threshold(RPMA_LOG_THRESHOLD, NULL));
	INVAL(rpma_log_get_threshold((enum rpma_log_threshold)-1, &level));
	EXPECT(level == (enum rpma_log_level)99);
	OK(rpma_log_set_threshold(RPMA_LOG_THRESHOLD_AUX, RPMA_LOG_LEVEL_ERROR));
	OK(rpma_log_get_threshold(RPMA_LOG_THRESHOLD_AUX, &level));
	EXPECT(level == RPMA_LOG_LEVEL_ERROR);
	OK(rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_NOTICE));
	OK(rpma_log_get_threshold(RPMA_LOG_THRESHOLD, &level));
	EXPECT(level == RPMA_LOG_LEVEL_NOTICE);
	OK(rpma_log_set_function(log_fn));
}

static void conn_cfg(void)
{
	struct rpma_conn_cfg *cfg = SENTINEL;
	INVAL(rpma_conn_cfg_new(NULL));
	OK(rpma_conn_cfg_new(&cfg));
	int timeout = 0;
	uint32_t v = 0;
	bool shared = true;
	OK(rpma_conn_cfg_get_timeout(cfg, &timeout));
	EXPECT(timeout == RPMA_DEFAULT_TIMEOUT_MS);
	OK(rpma_conn_cfg_get_cq_size(cfg, &v));
	EXPECT(v == 10);
	OK(rpma_conn_cfg_get_rcq_size(cfg, &v));
	EXPECT(v == 0);
	OK(rpma_conn_cfg_get_sq_size(cfg, &v));
	EXPECT(v == 10);
	OK(rpma_conn_cfg_get_rq_size(cfg, &v));
	EXPECT(v == 10);
	OK(rpma_conn_cfg_get_compl_channel(cfg, &shared));
	EXPECT(!shared);
	INVAL(rpma_conn_cfg_set_timeout(cfg, -1));
	INVAL(rpma_conn_cfg_set_timeout(NULL, 5));
	OK(rpma_conn_cfg_set_timeout(cfg, 5));
	OK(rpma_conn_cfg_get_timeout(cfg, &timeout));
	EXPECT(timeout == 5);
	INVAL(rpma_conn_cfg_get_timeout(NULL, &timeout));
	INVAL(rpma_conn_cfg_get_timeout(cfg, NULL));
	INVAL(rpma_conn_cfg_set_cq_size(NULL, 1));
	INVAL(rpma_conn_cfg_get_cq_size(cfg, NULL));
	INVAL(rpma_conn_cfg_set_rcq_size(NULL, 1));
	INVAL(rpma_conn_cfg_get_rcq_size(NULL, &v));
	INVAL(rpma_conn_cfg_set_sq_size(NULL, 1));
	INVAL(rpma_conn_cfg_get_sq_size(cfg, NULL));
	INVAL(rpma_conn_cfg_set_rq_size(NULL, 1));
	INVAL(rpma_conn_cfg_get_rq_size(NULL, &v));
	INVAL(rpma_conn_cfg_set_compl_channel(NULL, true));
	INVAL(rpma_conn_cfg_get_compl_channel(cfg, NULL));
	INVAL(rpma_conn_cfg_delete(NULL));
	OK(rpma_conn_cfg_delete(&cfg));
	EXPECT(cfg == NULL);
	OK(rpma_conn_cfg_delete(&cfg));
}

static void peer_cfg(void)
{
	struct rpma_peer_cfg *pcfg = SENTINEL;
	bool b = false;
	size_t size = 0;
	char desc[4] = {1};
	INVAL(rpma_peer_cfg_new(NULL));
	INVAL(rpma_peer_cfg_from_descriptor(NULL, 1, &pcfg));
	INVAL(rpma_peer_cfg_from_descriptor(desc, 0, &pcfg));
	INVAL(rpma_peer_cfg_from_descriptor(desc, 1, NULL));
	EXPECT(pcfg == SENTINEL);
	OK(rpma_peer_cfg_from_descriptor(desc, 1, &pcfg));
	/* a desc_size beyond the descriptor: only the descriptor's byte is read */
	struct rpma_peer_cfg *pcfg2 = NULL;
	OK(rpma_peer_cfg_from_descriptor(desc, SIZE_MAX, &pcfg2));
	OK(rpma_peer_cfg_delete(&pcfg2));
	OK(rpma_peer_cfg_get_direct_write_to_pmem(pcfg, &b));
	EXPECT(b);
	INVAL(rpma_peer_cfg_set_direct_write_to_pmem(NULL, true));
	INVAL(rpma_peer_cfg_get_direct_write_to_pmem(NULL, &b));
	INVAL(rpma_peer_cfg_get_direct_write_to_pmem(pcfg, NULL));
	INVAL(rpma_peer_cfg_get_descriptor(NULL, desc));
	INVAL(rpma_peer_cfg_get_descriptor(pcfg, NULL));
	INVAL(rpma_peer_cfg_get_descriptor_size(NULL, &size));
	INVAL(rpma_peer_cfg_get_descriptor_size(pcfg, NULL));
	OK(rpma_peer_cfg_set_direct_write_to_pmem(pcfg, false));
	OK(rpma_peer_cfg_get_descriptor(pcfg, desc));
	EXPECT(desc[0] == 0);
	INVAL(rpma_peer_cfg_delete(NULL));
	OK(rpma_peer_cfg_delete(&pcfg));
	EXPECT(pcfg == NULL);
	OK(rpma_peer_cfg_delete(&pcfg));
}

static struct ibv_wc drain_one(struct rpma_cq *cq)
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
	strings();
	logging();
	conn_cfg();
	peer_cfg();

	/* devices and peers */
	struct ibv_context *ctx = SENTINEL;
	INVAL(rpma_utils_get_ibv_context(NULL, RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));
	INVAL(rpma_utils_get_ibv_context(ADDR, (enum rpma_util_ibv_context_type)2, &ctx));
	INVAL(rpma_utils_get_ibv_context(ADDR, RPMA_UTIL_IBV_CONTEXT_LOCAL, NULL));
	RET(rpma_utils_get_ibv_context("192.0.2.1", RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx),
		RPMA_E_PROVIDER);
	EXPECT(ctx == SENTINEL);
	OK(rpma_utils_get_ibv_context(ADDR, RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx));
	struct ibv_context *ctx2 = NULL;
	OK(rpma_utils_get_ibv_context(ADDR, RPMA_UTIL_IBV_CONTEXT_REMOTE, &ctx2));
	EXPECT(ctx2 == ctx);
	int odp = 0;
	INVAL(rpma_utils_ibv_context_is_odp_capable(NULL, &odp));
	INVAL(rpma_utils_ibv_context_is_odp_capable(ctx, NULL));
	INVAL(rpma_utils_ibv_context_is_odp_capable((struct ibv_context *)&odp, &odp));

	struct rpma_peer *peer = SENTINEL;
	INVAL(rpma_peer_new(NULL, &peer));
	INVAL(rpma_peer_new(ctx, NULL));
	INVAL(rpma_peer_new((struct ibv_context *)&odp, &peer));
	EXPECT(peer == SENTINEL);
	OK(rpma_peer_new(ctx, &peer));

	/* local regions */
	static char buf[8192];
	struct rpma_mr_local *mr = SENTINEL;
	INVAL(rpma_mr_reg(NULL, buf, 4096, RPMA_MR_USAGE_SEND, &mr));
	INVAL(rpma_mr_reg(peer, NULL, 4096, RPMA_MR_USAGE_SEND, &mr));
	INVAL(rpma_mr_reg(peer, buf, 0, RPMA_MR_USAGE_SEND, &mr));
	INVAL(rpma_mr_reg(peer, buf, 4096, 0, &mr));
	INVAL(rpma_mr_reg(peer, buf, 4096, 0x100, &mr));
	INVAL(rpma_mr_reg(peer, buf, 4096, -1, &mr));
	INVAL(rpma_mr_reg(peer, buf, 4096, RPMA_MR_USAGE_SEND, NULL));
	EXPECT(mr == SENTINEL);
	OK(rpma_mr_reg(peer, buf, 4096,
		RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_READ_DST | RPMA_MR_USAGE_WRITE_SRC |
			RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY |
			RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV,
		&mr));
	char desc[21];
	size_t size = 0;
	void *ptr = NULL;
	INVAL(rpma_mr_get_descriptor(NULL, desc));
	INVAL(rpma_mr_get_descriptor(mr, NULL));
	INVAL(rpma_mr_get_descriptor_size(NULL, &size));
	INVAL(rpma_mr_get_descriptor_size(mr, NULL));
	INVAL(rpma_mr_get_ptr(NULL, &ptr));
	INVAL(rpma_mr_get_ptr(mr, NULL));
	INVAL(rpma_mr_get_size(NULL, &size));
	INVAL(rpma_mr_get_size(mr, NULL));
	OK(rpma_mr_get_descriptor(mr, desc));
	EXPECT((unsigned char)desc[20] == 0xdf); /* the usage byte */

	/* remote regions */
	struct rpma_mr_remote *remote = SENTINEL;
	char zero_usage[21];
	memcpy(zero_usage, desc, 21);
	zero_usage[20] = 0;
	INVAL(rpma_mr_remote_from_descriptor(NULL, 21, &remote));
	INVAL(rpma_mr_remote_from_descriptor(desc, 21, NULL));
	INVAL(rpma_mr_remote_from_descriptor(desc, 20, &remote));
	INVAL(rpma_mr_remote_from_descriptor(zero_usage, 21, &remote));
	EXPECT(remote == SENTINEL);
	OK(rpma_mr_remote_from_descriptor(desc, 21, &remote));
	/* a desc_size beyond the descriptor: only its 21 bytes are read */
	struct rpma_mr_remote *remote2 = NULL;
	OK(rpma_mr_remote_from_descriptor(desc, SIZE_MAX, &remote2));
	OK(rpma_mr_remote_delete(&remote2));
	int flush_type = -1;
	INVAL(rpma_mr_remote_get_size(NULL, &size));
	INVAL(rpma_mr_remote_get_size(remote, NULL));
	INVAL(rpma_mr_remote_get_flush_type(NULL, &flush_type));
	INVAL(rpma_mr_remote_get_flush_type(remote, NULL));
	OK(rpma_mr_remote_get_size(remote, &size));
	EXPECT(size == 4096);
	OK(rpma_mr_remote_get_flush_type(remote, &flush_type));
	EXPECT(flush_type == RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY);

	/* endpoint and requests */
	struct rpma_ep *ep = SENTINEL;
	INVAL(rpma_ep_listen(NULL, ADDR, PORT, &ep));
	INVAL(rpma_ep_listen(peer, NULL, PORT, &ep));
	INVAL(rpma_ep_listen(peer, ADDR, NULL, &ep));
	INVAL(rpma_ep_listen(peer, ADDR, PORT, NULL));
	EXPECT(ep == SENTINEL);
	logged = 0;
	OK(rpma_ep_listen(peer, ADDR, PORT, &ep));
	EXPECT(logged == 1 && strstr(last_log, PORT) != NULL); /* through log_fn */
	OK(rpma_log_set_function(RPMA_LOG_USE_DEFAULT_FUNCTION));
	int fd = -1;
	INVAL(rpma_ep_get_fd(NULL, &fd));
	INVAL(rpma_ep_get_fd(ep, NULL));
	struct rpma_conn_req *req = SENTINEL, *sreq = NULL;
	INVAL(rpma_ep_next_conn_req(NULL, NULL, &req));
	INVAL(rpma_ep_next_conn_req(ep, NULL, NULL));
	INVAL(rpma_conn_req_new(NULL, ADDR, PORT, NULL, &req));
	INVAL(rpma_conn_req_new(peer, NULL, PORT, NULL, &req));
	INVAL(rpma_conn_req_new(peer, ADDR, NULL, NULL, &req));
	INVAL(rpma_conn_req_new(peer, ADDR, PORT, NULL, NULL));
	EXPECT(req == SENTINEL);

	/* connect with an invalid argument: the request is consumed (deleted) */
	struct rpma_conn *conn = SENTINEL, *sconn = NULL;
	OK(rpma_conn_req_new(peer, ADDR, PORT, NULL, &req));
	INVAL(rpma_conn_req_connect(&req, NULL, NULL));
	EXPECT(req == NULL);
	INVAL(rpma_conn_req_connect(&req, NULL, &conn));
	INVAL(rpma_conn_req_connect(NULL, NULL, &conn));
	OK(rpma_conn_req_new(peer, ADDR, PORT, NULL, &req));
	struct rpma_conn_private_data empty = {"x", 0};
	INVAL(rpma_conn_req_connect(&req, &empty, &conn));
	EXPECT(req == NULL && conn == SENTINEL);
	INVAL(rpma_conn_req_delete(NULL));
	OK(rpma_conn_req_delete(&req));

	/* a connection */
	OK(rpma_conn_req_new(peer, ADDR, PORT, NULL, &req));
	struct rpma_conn_private_data pd = {SENTINEL, 1};
	INVAL(rpma_conn_req_get_private_data(NULL, &pd));
	INVAL(rpma_conn_req_get_private_data(req, NULL));
	OK(rpma_conn_req_get_private_data(req, &pd));
	EXPECT(pd.ptr == NULL && pd.len == 0);
	OK(rpma_conn_req_connect(&req, NULL, &conn));
	OK(rpma_ep_next_conn_req(ep, NULL, &sreq));
	INVAL(rpma_conn_req_recv(NULL, mr, 0, 8, NULL));
	INVAL(rpma_conn_req_recv(sreq, NULL, 0, 8, NULL));
	OK(rpma_conn_req_recv(sreq, mr, 4096 - 64, 64, (void *)9));
	OK(rpma_conn_req_connect(&sreq, NULL, &sconn));
	enum rpma_conn_event ev = RPMA_CONN_UNDEFINED;
	INVAL(rpma_conn_next_event(NULL, &ev));
	INVAL(rpma_conn_next_event(conn, NULL));
	OK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_ESTABLISHED);
	OK(rpma_conn_next_event(sconn, &ev));
	EXPECT(ev == RPMA_CONN_ESTABLISHED);

	/* connection getters */
	struct rpma_cq *cq = SENTINEL;
	uint32_t qp = 0;
	bool is_rcq = false;
	INVAL(rpma_conn_get_event_fd(NULL, &fd));
	INVAL(rpma_conn_get_event_fd(conn, NULL));
	INVAL(rpma_conn_get_compl_fd(NULL, &fd));
	INVAL(rpma_conn_get_compl_fd(conn, NULL));
	RET(rpma_conn_get_compl_fd(conn, &fd), RPMA_E_NOT_SHARED_CHNL);
	INVAL(rpma_conn_wait(NULL, 0, &cq, &is_rcq));
	INVAL(rpma_conn_wait(conn, 0, NULL, &is_rcq));
	RET(rpma_conn_wait(conn, 0, &cq, &is_rcq), RPMA_E_NOT_SHARED_CHNL);
	INVAL(rpma_conn_get_cq(NULL, &cq));
	INVAL(rpma_conn_get_cq(conn, NULL));
	INVAL(rpma_conn_get_rcq(NULL, &cq));
	INVAL(rpma_conn_get_rcq(conn, NULL));
	INVAL(rpma_conn_get_qp_num(NULL, &qp));
	INVAL(rpma_conn_get_qp_num(conn, NULL));
	INVAL(rpma_conn_get_private_data(NULL, &pd));
	INVAL(rpma_conn_get_private_data(conn, NULL));
	struct rpma_peer_cfg *pcfg = NULL;
	OK(rpma_peer_cfg_new(&pcfg));
	INVAL(rpma_conn_apply_remote_peer_cfg(NULL, pcfg));
	INVAL(rpma_conn_apply_remote_peer_cfg(conn, NULL));
	OK(rpma_peer_cfg_delete(&pcfg));
	EXPECT(cq == SENTINEL);
	OK(rpma_conn_get_cq(conn, &cq));

	/* completion queue */
	struct ibv_wc wc[2];
	int got = -1;
	INVAL(rpma_cq_get_fd(NULL, &fd));
	INVAL(rpma_cq_get_fd(cq, NULL));
	INVAL(rpma_cq_wait(NULL));
	INVAL(rpma_cq_get_wc(NULL, 1, wc, &got));
	INVAL(rpma_cq_get_wc(cq, 0, wc, &got));
	INVAL(rpma_cq_get_wc(cq, -1, wc, &got));
	INVAL(rpma_cq_get_wc(cq, 1, NULL, &got));
	INVAL(rpma_cq_get_wc(cq, 2, wc, NULL));
	RET(rpma_cq_get_wc(cq, 2, wc, &got), RPMA_E_NO_COMPLETION);
	EXPECT(got == -1);

	/* operations: NULLs, flags, forms */
	const char eight[8] = "01234567";
	INVAL(rpma_read(NULL, mr, 0, remote, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
	INVAL(rpma_read(conn, mr, 0, remote, 0, 8, 0, NULL));
	INVAL(rpma_read(conn, NULL, 0, remote, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
	INVAL(rpma_read(conn, mr, 0, NULL, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
	INVAL(rpma_read(conn, NULL, 0, NULL, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
	INVAL(rpma_read(conn, NULL, 4, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, NULL));
	INVAL(rpma_write(NULL, remote, 0, mr, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
	INVAL(rpma_write(conn, remote, 0, mr, 0, 8, 0, NULL));
	INVAL(rpma_write(conn, NULL, 0, mr, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
	INVAL(rpma_write(conn, remote, 0, NULL, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
	INVAL(rpma_write(conn, NULL, 0, NULL, 1, 0, RPMA_F_COMPLETION_ALWAYS, NULL));
	INVAL(rpma_write_with_imm(NULL, remote, 0, mr, 0, 8, RPMA_F_COMPLETION_ALWAYS, 1, NULL));
	INVAL(rpma_write_with_imm(conn, remote, 0, mr, 0, 8, 0, 1, NULL));
	INVAL(rpma_write_with_imm(conn, NULL, 0, mr, 0, 8, RPMA_F_COMPLETION_ALWAYS, 1, NULL));
	INVAL(rpma_atomic_write(NULL, remote, 0, eight, RPMA_F_COMPLETION_ALWAYS, NULL));
	INVAL(rpma_atomic_write(conn, NULL, 0, eight, RPMA_F_COMPLETION_ALWAYS, NULL));
	INVAL(rpma_atomic_write(conn, remote, 0, NULL, RPMA_F_COMPLETION_ALWAYS, NULL));
	INVAL(rpma_atomic_write(conn, remote, 3, eight, RPMA_F_COMPLETION_ALWAYS, NULL));
	INVAL(rpma_atomic_write(conn, remote, 0, eight, 0, NULL));
	INVAL(rpma_flush(NULL, remote, 0, 8, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS, NULL));
	INVAL(rpma_flush(conn, NULL, 0, 8, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS, NULL));
	INVAL(rpma_flush(conn, remote, 0, 8, (enum rpma_flush_type)7, RPMA_F_COMPLETION_ALWAYS, NULL));
	INVAL(rpma_flush(conn, remote, 0, 8, RPMA_FLUSH_TYPE_VISIBILITY, 0, NULL));
	RET(rpma_flush(conn, remote, 0, 8, RPMA_FLUSH_TYPE_PERSISTENT, RPMA_F_COMPLETION_ALWAYS, NULL),
		RPMA_E_NOSUPP);
	INVAL(rpma_send(NULL, mr, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
	INVAL(rpma_send(conn, mr, 0, 8, 0, NULL));
	INVAL(rpma_send(conn, NULL, 0, 8, RPMA_F_COMPLETION_ALWAYS, NULL));
	INVAL(rpma_send_with_imm(NULL, mr, 0, 8, RPMA_F_COMPLETION_ALWAYS, 1, NULL));
	INVAL(rpma_send_with_imm(conn, NULL, 8, 0, RPMA_F_COMPLETION_ALWAYS, 1, NULL));
	INVAL(rpma_recv(NULL, mr, 0, 8, NULL));
	INVAL(rpma_recv(conn, NULL, 0, 8, NULL));

	/* the zero-byte read and write post and complete */
	OK(rpma_read(conn, NULL, 0, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, (void *)21));
	struct ibv_wc one = drain_one(cq);
	EXPECT(one.status == IBV_WC_SUCCESS && one.wr_id == 21 && one.opcode == IBV_WC_RDMA_READ);
	OK(rpma_write(conn, NULL, 0, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, (void *)22));
	one = drain_one(cq);
	EXPECT(one.status == IBV_WC_SUCCESS && one.wr_id == 22 && one.opcode == IBV_WC_RDMA_WRITE);
	/* a write with immediate data consumes the receive posted on the request */
	OK(rpma_write_with_imm(conn, remote, 0, mr, 0, 8, RPMA_F_COMPLETION_ALWAYS, 42, (void *)23));
	one = drain_one(cq);
	EXPECT(one.status == IBV_WC_SUCCESS && one.wr_id == 23);
	struct rpma_cq *scq = NULL;
	OK(rpma_conn_get_cq(sconn, &scq));
	one = drain_one(scq);
	EXPECT(one.status == IBV_WC_SUCCESS && one.wr_id == 9 &&
		one.opcode == IBV_WC_RECV_RDMA_WITH_IMM && (one.wc_flags & IBV_WC_WITH_IMM));
	/* a zero-byte receive, then a zero-byte send */
	OK(rpma_recv(sconn, NULL, 0, 0, (void *)24));
	OK(rpma_send(conn, NULL, 0, 0, RPMA_F_COMPLETION_ALWAYS, (void *)25));
	one = drain_one(cq);
	EXPECT(one.status == IBV_WC_SUCCESS && one.wr_id == 25 && one.opcode == IBV_WC_SEND);
	one = drain_one(scq);
	EXPECT(one.status == IBV_WC_SUCCESS && one.wr_id == 24 && one.byte_len == 0);

	/* teardown; each delete NULLs and a second one is a no-op */
	INVAL(rpma_conn_disconnect(NULL));
	OK(rpma_conn_disconnect(conn));
	OK(rpma_conn_next_event(sconn, &ev));
	EXPECT(ev == RPMA_CONN_CLOSED);
	OK(rpma_conn_disconnect(sconn));
	OK(rpma_conn_next_event(conn, &ev));
	EXPECT(ev == RPMA_CONN_CLOSED);
	INVAL(rpma_conn_delete(NULL));
	OK(rpma_conn_delete(&conn));
	OK(rpma_conn_delete(&sconn));
	EXPECT(conn == NULL && sconn == NULL);
	OK(rpma_conn_delete(&conn));
	INVAL(rpma_ep_shutdown(NULL));
	OK(rpma_ep_shutdown(&ep));
	OK(rpma_ep_shutdown(&ep));
	INVAL(rpma_mr_remote_delete(NULL));
	OK(rpma_mr_remote_delete(&remote));
	OK(rpma_mr_remote_delete(&remote));
	INVAL(rpma_mr_dereg(NULL));
	OK(rpma_mr_dereg(&mr));
	OK(rpma_mr_dereg(&mr));
	INVAL(rpma_peer_delete(NULL));
	OK(rpma_peer_delete(&peer));
	OK(rpma_peer_delete(&peer));
	EXPECT(peer == NULL && mr == NULL && remote == NULL && ep == NULL);
	printf("errors: OK\n");
	return 0;
}
