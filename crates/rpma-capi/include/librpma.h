/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * librpma.h -- the C interface of rpma-rs's librpma.so.0 (crates/rpma-capi).
 *
 * Written for rpma-rs: the names, values and prototypes are those of librpma 1.3's
 * interface, so programs written for it compile unchanged against the functions
 * declared here. All 84 functions of librpma 1.3 are declared; docs/capi.md says
 * how this library differs.
 *
 * Return values: 0 on success or a negative RPMA_E_* code. Deleting functions take
 * the address of the handle, free the object and store NULL there.
 */
#ifndef RPMA_RS_LIBRPMA_H
#define RPMA_RS_LIBRPMA_H 1

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <infiniband/verbs.h> /* struct ibv_context, struct ibv_wc */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- return codes ---- */
#define RPMA_E_UNKNOWN (-100000)
#define RPMA_E_NOSUPP (-100001)
#define RPMA_E_PROVIDER (-100002)
#define RPMA_E_NOMEM (-100003)
#define RPMA_E_INVAL (-100004)
#define RPMA_E_NO_COMPLETION (-100005)
#define RPMA_E_NO_EVENT (-100006)
#define RPMA_E_AGAIN (-100007)
#define RPMA_E_SHARED_CHANNEL (-100008)
#define RPMA_E_NOT_SHARED_CHNL (-100009)

/* a description of any return code ("Unknown error" for values that are none) */
const char *rpma_err_2str(int ret);

/* ---- constants ---- */
#define RPMA_W_WAIT_FOR_COMPLETION (1)
#define RPMA_DEFAULT_TIMEOUT_MS 1000
#define RPMA_ATOMIC_WRITE_ALIGNMENT 8

/* usages of a registered region (bits of the `usage` argument of rpma_mr_reg) */
#define RPMA_MR_USAGE_READ_SRC (1 << 0)
#define RPMA_MR_USAGE_READ_DST (1 << 1)
#define RPMA_MR_USAGE_WRITE_SRC (1 << 2)
#define RPMA_MR_USAGE_WRITE_DST (1 << 3)
#define RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY (1 << 4)
#define RPMA_MR_USAGE_FLUSH_TYPE_PERSISTENT (1 << 5)
#define RPMA_MR_USAGE_SEND (1 << 6)
#define RPMA_MR_USAGE_RECV (1 << 7)

/* when an operation produces a completion (0 is invalid) */
#define RPMA_F_COMPLETION_ON_ERROR (1 << 0)
#define RPMA_F_COMPLETION_ALWAYS ((1 << 1) | RPMA_F_COMPLETION_ON_ERROR)

enum rpma_util_ibv_context_type {
	RPMA_UTIL_IBV_CONTEXT_LOCAL,  /* the device owning a local address */
	RPMA_UTIL_IBV_CONTEXT_REMOTE, /* the device routing to a remote address */
};

enum rpma_conn_event {
	RPMA_CONN_UNDEFINED = -1,
	RPMA_CONN_ESTABLISHED,
	RPMA_CONN_CLOSED,
	RPMA_CONN_LOST,
	RPMA_CONN_REJECTED,
	RPMA_CONN_UNREACHABLE,
};

enum rpma_flush_type {
	RPMA_FLUSH_TYPE_PERSISTENT,
	RPMA_FLUSH_TYPE_VISIBILITY,
};

/* ---- logging ---- */
enum rpma_log_level {
	RPMA_LOG_DISABLED = -1,
	RPMA_LOG_LEVEL_FATAL,
	RPMA_LOG_LEVEL_ERROR,
	RPMA_LOG_LEVEL_WARNING,
	RPMA_LOG_LEVEL_NOTICE,
	RPMA_LOG_LEVEL_INFO,
	RPMA_LOG_LEVEL_DEBUG,
};

enum rpma_log_threshold {
	RPMA_LOG_THRESHOLD,     /* messages above it are dropped */
	RPMA_LOG_THRESHOLD_AUX, /* a hint for the log function */
	RPMA_LOG_THRESHOLD_MAX,
};

/* A log function: printf-style format and arguments; it must be thread-safe. */
typedef void rpma_log_function(enum rpma_log_level level, const char *file_name,
		const int line_no, const char *function_name, const char *message_format, ...);

#define RPMA_LOG_USE_DEFAULT_FUNCTION (NULL)

int rpma_log_set_function(rpma_log_function *log_function);
int rpma_log_set_threshold(enum rpma_log_threshold threshold, enum rpma_log_level level);
int rpma_log_get_threshold(enum rpma_log_threshold threshold, enum rpma_log_level *level);

/* ---- devices ---- */
int rpma_utils_get_ibv_context(const char *addr, enum rpma_util_ibv_context_type type,
		struct ibv_context **ibv_ctx_ptr);
int rpma_utils_ibv_context_is_odp_capable(struct ibv_context *ibv_ctx, int *is_odp_capable);
const char *rpma_utils_conn_event_2str(enum rpma_conn_event conn_event);

/* ---- opaque handles ---- */
struct rpma_peer;
struct rpma_peer_cfg;
struct rpma_mr_local;
struct rpma_mr_remote;
struct rpma_conn_cfg;
struct rpma_ep;
struct rpma_conn_req;
struct rpma_conn;
struct rpma_cq;
struct rpma_srq;
struct rpma_srq_cfg;

/* ---- peer configuration ---- */
int rpma_peer_cfg_new(struct rpma_peer_cfg **pcfg_ptr);
int rpma_peer_cfg_delete(struct rpma_peer_cfg **pcfg_ptr);
int rpma_peer_cfg_set_direct_write_to_pmem(struct rpma_peer_cfg *pcfg, bool supported);
int rpma_peer_cfg_get_direct_write_to_pmem(const struct rpma_peer_cfg *pcfg, bool *supported);
int rpma_peer_cfg_get_descriptor(const struct rpma_peer_cfg *pcfg, void *desc);
int rpma_peer_cfg_get_descriptor_size(const struct rpma_peer_cfg *pcfg, size_t *desc_size);
int rpma_peer_cfg_from_descriptor(const void *desc, size_t desc_size,
		struct rpma_peer_cfg **pcfg_ptr);

/* ---- peer ---- */
int rpma_peer_new(struct ibv_context *ibv_ctx, struct rpma_peer **peer_ptr);
int rpma_peer_delete(struct rpma_peer **peer_ptr);

/* ---- memory regions ---- */
int rpma_mr_reg(struct rpma_peer *peer, void *ptr, size_t size, int usage,
		struct rpma_mr_local **mr_ptr);
int rpma_mr_dereg(struct rpma_mr_local **mr_ptr);
int rpma_mr_get_descriptor(const struct rpma_mr_local *mr, void *desc);
int rpma_mr_get_descriptor_size(const struct rpma_mr_local *mr, size_t *desc_size);
int rpma_mr_get_ptr(const struct rpma_mr_local *mr, void **ptr);
int rpma_mr_get_size(const struct rpma_mr_local *mr, size_t *size);
int rpma_mr_remote_from_descriptor(const void *desc, size_t desc_size,
		struct rpma_mr_remote **mr_ptr);
int rpma_mr_remote_get_size(const struct rpma_mr_remote *mr, size_t *size);
int rpma_mr_remote_get_flush_type(const struct rpma_mr_remote *mr, int *flush_type);
int rpma_mr_remote_delete(struct rpma_mr_remote **mr_ptr);
/* advice: IBV_ADVISE_MR_ADVICE_*; flags: IBV_ADVISE_MR_FLAG_* */
int rpma_mr_advise(struct rpma_mr_local *mr, size_t offset, size_t len, int advice,
		uint32_t flags);

/* ---- connection configuration ---- */
int rpma_conn_cfg_new(struct rpma_conn_cfg **cfg_ptr);
int rpma_conn_cfg_delete(struct rpma_conn_cfg **cfg_ptr);
int rpma_conn_cfg_set_timeout(struct rpma_conn_cfg *cfg, int timeout_ms);
int rpma_conn_cfg_get_timeout(const struct rpma_conn_cfg *cfg, int *timeout_ms);
int rpma_conn_cfg_set_cq_size(struct rpma_conn_cfg *cfg, uint32_t cq_size);
int rpma_conn_cfg_get_cq_size(const struct rpma_conn_cfg *cfg, uint32_t *cq_size);
int rpma_conn_cfg_set_rcq_size(struct rpma_conn_cfg *cfg, uint32_t rcq_size);
int rpma_conn_cfg_get_rcq_size(const struct rpma_conn_cfg *cfg, uint32_t *rcq_size);
int rpma_conn_cfg_set_sq_size(struct rpma_conn_cfg *cfg, uint32_t sq_size);
int rpma_conn_cfg_get_sq_size(const struct rpma_conn_cfg *cfg, uint32_t *sq_size);
int rpma_conn_cfg_set_rq_size(struct rpma_conn_cfg *cfg, uint32_t rq_size);
int rpma_conn_cfg_get_rq_size(const struct rpma_conn_cfg *cfg, uint32_t *rq_size);
int rpma_conn_cfg_set_compl_channel(struct rpma_conn_cfg *cfg, bool shared);
int rpma_conn_cfg_get_compl_channel(const struct rpma_conn_cfg *cfg, bool *shared);
int rpma_conn_cfg_set_srq(struct rpma_conn_cfg *cfg, struct rpma_srq *srq);
int rpma_conn_cfg_get_srq(const struct rpma_conn_cfg *cfg, struct rpma_srq **srq_ptr);

/* ---- shared receive queues ---- */
int rpma_srq_cfg_new(struct rpma_srq_cfg **cfg_ptr);
int rpma_srq_cfg_delete(struct rpma_srq_cfg **cfg_ptr);
int rpma_srq_cfg_set_rq_size(struct rpma_srq_cfg *cfg, uint32_t rq_size);
int rpma_srq_cfg_get_rq_size(const struct rpma_srq_cfg *cfg, uint32_t *rq_size);
int rpma_srq_cfg_set_rcq_size(struct rpma_srq_cfg *cfg, uint32_t rcq_size);
int rpma_srq_cfg_get_rcq_size(const struct rpma_srq_cfg *cfg, uint32_t *rcq_size);
int rpma_srq_new(struct rpma_peer *peer, struct rpma_srq_cfg *cfg, struct rpma_srq **srq_ptr);
int rpma_srq_delete(struct rpma_srq **srq_ptr);
int rpma_srq_recv(struct rpma_srq *srq, struct rpma_mr_local *dst, size_t offset, size_t len,
		const void *op_context);
int rpma_srq_get_rcq(const struct rpma_srq *srq, struct rpma_cq **rcq_ptr);

/*
 * ---- private data exchanged when connecting ----
 * Given to rpma_conn_req_connect: read during the call only. Filled in by
 * rpma_conn_req_get_private_data / rpma_conn_get_private_data: ptr points into memory the
 * library owns (valid until the request is connected or deleted / the connection is deleted)
 * and is READ-ONLY although the member is `void *` (librpma's type): writing through it is
 * undefined behaviour.
 */
struct rpma_conn_private_data {
	void *ptr;
	uint8_t len;
};

/* ---- endpoint (passive side) ---- */
int rpma_ep_listen(struct rpma_peer *peer, const char *addr, const char *port,
		struct rpma_ep **ep_ptr);
int rpma_ep_shutdown(struct rpma_ep **ep_ptr);
int rpma_ep_get_fd(const struct rpma_ep *ep, int *fd);
int rpma_ep_next_conn_req(struct rpma_ep *ep, const struct rpma_conn_cfg *cfg,
		struct rpma_conn_req **req_ptr);

/* ---- connection requests ---- */
int rpma_conn_req_new(struct rpma_peer *peer, const char *addr, const char *port,
		const struct rpma_conn_cfg *cfg, struct rpma_conn_req **req_ptr);
int rpma_conn_req_connect(struct rpma_conn_req **req_ptr,
		const struct rpma_conn_private_data *pdata, struct rpma_conn **conn_ptr);
int rpma_conn_req_delete(struct rpma_conn_req **req_ptr);
int rpma_conn_req_recv(struct rpma_conn_req *req, struct rpma_mr_local *dst, size_t offset,
		size_t len, const void *op_context);
/* pdata->ptr is read-only, owned by the request (see struct rpma_conn_private_data) */
int rpma_conn_req_get_private_data(const struct rpma_conn_req *req,
		struct rpma_conn_private_data *pdata);

/* ---- connections ---- */
int rpma_conn_next_event(struct rpma_conn *conn, enum rpma_conn_event *event);
int rpma_conn_get_event_fd(const struct rpma_conn *conn, int *fd);
int rpma_conn_get_compl_fd(const struct rpma_conn *conn, int *fd);
int rpma_conn_get_cq(const struct rpma_conn *conn, struct rpma_cq **cq_ptr);
int rpma_conn_get_rcq(const struct rpma_conn *conn, struct rpma_cq **rcq_ptr);
int rpma_conn_wait(struct rpma_conn *conn, int flags, struct rpma_cq **cq, bool *is_rcq);
int rpma_conn_disconnect(struct rpma_conn *conn);
int rpma_conn_delete(struct rpma_conn **conn_ptr);
/* pdata->ptr is read-only, owned by the connection (see struct rpma_conn_private_data) */
int rpma_conn_get_private_data(const struct rpma_conn *conn,
		struct rpma_conn_private_data *pdata);
int rpma_conn_apply_remote_peer_cfg(struct rpma_conn *conn, const struct rpma_peer_cfg *pcfg);
int rpma_conn_get_qp_num(const struct rpma_conn *conn, uint32_t *qp_num);

/* ---- operations (each posts one work request; its result is a completion) ---- */
int rpma_read(struct rpma_conn *conn, struct rpma_mr_local *dst, size_t dst_offset,
		const struct rpma_mr_remote *src, size_t src_offset, size_t len, int flags,
		const void *op_context);
int rpma_write(struct rpma_conn *conn, struct rpma_mr_remote *dst, size_t dst_offset,
		const struct rpma_mr_local *src, size_t src_offset, size_t len, int flags,
		const void *op_context);
int rpma_write_with_imm(struct rpma_conn *conn, struct rpma_mr_remote *dst, size_t dst_offset,
		const struct rpma_mr_local *src, size_t src_offset, size_t len, int flags,
		uint32_t imm, const void *op_context);
int rpma_atomic_write(struct rpma_conn *conn, struct rpma_mr_remote *dst, size_t dst_offset,
		const char src[8], int flags, const void *op_context);
int rpma_flush(struct rpma_conn *conn, struct rpma_mr_remote *dst, size_t dst_offset,
		size_t len, enum rpma_flush_type type, int flags, const void *op_context);
int rpma_send(struct rpma_conn *conn, const struct rpma_mr_local *src, size_t offset,
		size_t len, int flags, const void *op_context);
int rpma_send_with_imm(struct rpma_conn *conn, const struct rpma_mr_local *src, size_t offset,
		size_t len, int flags, uint32_t imm, const void *op_context);
int rpma_recv(struct rpma_conn *conn, struct rpma_mr_local *dst, size_t offset, size_t len,
		const void *op_context);

/* ---- completion queues ---- */
int rpma_cq_get_fd(const struct rpma_cq *cq, int *fd);
int rpma_cq_wait(struct rpma_cq *cq);
int rpma_cq_get_wc(struct rpma_cq *cq, int num_entries, struct ibv_wc *wc,
		int *num_entries_got);

#ifdef __cplusplus
}
#endif

#endif /* RPMA_RS_LIBRPMA_H */
