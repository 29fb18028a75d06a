//! # rpma-capi: librpma's C ABI on rpma-rs
//!
//! Builds `librpma.so` (SONAME `librpma.so.0`, every `rpma_*` symbol under the version node
//! `LIBRPMA_1.0`, as Debian's librpma0 exports them), with the signatures,
//! return codes and out-parameter behaviour of librpma 1.3. The header is
//! `include/librpma.h`; `docs/capi.md` lists how this library differs from C librpma.
//!
//! Every exported body runs inside [`std::panic::catch_unwind`]: a panic becomes
//! `RPMA_E_UNKNOWN`, never an unwind across the C boundary. Opaque handles are `Box` pointers to
//! Rust objects; the delete functions take `T **`, free the object and store NULL, so a second
//! delete through the same pointer is a no-op returning 0, as in librpma.
//!
//! librpma's codes and names come from `rpma_core::librpma`, their one place: an error's
//! `ErrorKind` becomes its `RPMA_E_*` code, `rpma_err_2str` gives its strings, and a log line
//! (librpma's own, or the ERROR line of a failed provider call) names the librpma function of
//! the Rust item that logs or failed (`Conn::read` → `rpma_read`).
//!
//! The backend is chosen at run time by `RPMA_BACKEND` (read once, at first use, through
//! `rpma::any`, the facade crate's run-time choice): `verbs` (the default, unset or empty) is
//! rpma-verbs, over libibverbs and librdmacm (cargo feature `verbs`, on by default); `mock` is
//! the in-process mock fabric of rpma-mock. With an unknown name, or
//! `verbs` in a library built without it, every function that needs a backend fails with
//! `RPMA_E_PROVIDER` and one ERROR log line naming the problem. See the `backend` module for
//! how handles hold their backend's objects.
//!
//! Unsafe code follows docs/memory.md; the C-ABI rules are C1 (pointers from C), C2 (handles
//! from C) and C3 (function pointers from C).

#[macro_use]
mod setting;
mod backend;
mod conn;
mod conn_cfg;
mod conn_req;
mod cq;
mod ep;
mod err;
mod ffi;
mod log;
mod mr;
mod ops;
mod peer;
mod peer_cfg;
mod private_data;
mod srq;
mod srq_cfg;
mod utils;
mod wait;

/// Gives every exported function the default version `LIBRPMA_1.0` (the version script names
/// the node and hides everything else; rustc's own script would leave the names unversioned).
macro_rules! symver {
    ($($name:ident),+ $(,)?) => {
        std::arch::global_asm!(concat!($(".symver ", stringify!($name), ", ", stringify!($name), "@@LIBRPMA_1.0\n"),+));
    };
}

symver!(
    rpma_err_2str,
    rpma_utils_conn_event_2str,
    rpma_log_set_function,
    rpma_log_set_threshold,
    rpma_log_get_threshold,
    rpma_utils_get_ibv_context,
    rpma_utils_ibv_context_is_odp_capable,
    rpma_peer_new,
    rpma_peer_delete,
    rpma_peer_cfg_new,
    rpma_peer_cfg_delete,
    rpma_peer_cfg_set_direct_write_to_pmem,
    rpma_peer_cfg_get_direct_write_to_pmem,
    rpma_peer_cfg_get_descriptor,
    rpma_peer_cfg_get_descriptor_size,
    rpma_peer_cfg_from_descriptor,
    rpma_mr_reg,
    rpma_mr_dereg,
    rpma_mr_get_descriptor,
    rpma_mr_get_descriptor_size,
    rpma_mr_get_ptr,
    rpma_mr_get_size,
    rpma_mr_remote_from_descriptor,
    rpma_mr_remote_get_size,
    rpma_mr_remote_get_flush_type,
    rpma_mr_remote_delete,
    rpma_conn_cfg_new,
    rpma_conn_cfg_delete,
    rpma_conn_cfg_set_timeout,
    rpma_conn_cfg_get_timeout,
    rpma_conn_cfg_set_cq_size,
    rpma_conn_cfg_get_cq_size,
    rpma_conn_cfg_set_rcq_size,
    rpma_conn_cfg_get_rcq_size,
    rpma_conn_cfg_set_sq_size,
    rpma_conn_cfg_get_sq_size,
    rpma_conn_cfg_set_rq_size,
    rpma_conn_cfg_get_rq_size,
    rpma_conn_cfg_set_compl_channel,
    rpma_conn_cfg_get_compl_channel,
    rpma_ep_listen,
    rpma_ep_shutdown,
    rpma_ep_get_fd,
    rpma_ep_next_conn_req,
    rpma_conn_req_new,
    rpma_conn_req_connect,
    rpma_conn_req_delete,
    rpma_conn_req_recv,
    rpma_conn_req_get_private_data,
    rpma_conn_next_event,
    rpma_conn_get_event_fd,
    rpma_conn_get_compl_fd,
    rpma_conn_get_cq,
    rpma_conn_get_rcq,
    rpma_conn_disconnect,
    rpma_conn_delete,
    rpma_conn_get_private_data,
    rpma_conn_apply_remote_peer_cfg,
    rpma_conn_wait,
    rpma_conn_get_qp_num,
    rpma_read,
    rpma_write,
    rpma_write_with_imm,
    rpma_atomic_write,
    rpma_flush,
    rpma_send,
    rpma_send_with_imm,
    rpma_recv,
    rpma_cq_get_fd,
    rpma_cq_wait,
    rpma_cq_get_wc,
    rpma_mr_advise,
    rpma_conn_cfg_set_srq,
    rpma_conn_cfg_get_srq,
    rpma_srq_cfg_new,
    rpma_srq_cfg_delete,
    rpma_srq_cfg_set_rq_size,
    rpma_srq_cfg_get_rq_size,
    rpma_srq_cfg_set_rcq_size,
    rpma_srq_cfg_get_rcq_size,
    rpma_srq_new,
    rpma_srq_delete,
    rpma_srq_recv,
    rpma_srq_get_rcq,
);
