//! The provider's data-path entry points, resolved once per queue (rule V8 of docs/memory.md).
//!
//! libibverbs' `ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv` and `ibv_poll_cq` are
//! inline functions that fetch the provider's function from the device context's operation
//! table on every call (two dependent loads), and the bindings unwrap it as an `Option`: a panic
//! path on every post and poll. A queue pair, a shared receive queue and a CQ look their
//! functions up here when they are made (a missing one is an error then) and call them directly
//! after that.

use std::ffi::c_int;

use rdma_sys as ffi;
use rpma_core::{Error, Result};

/// `ibv_context_ops::post_send`.
pub(crate) type PostSend =
    unsafe extern "C" fn(*mut ffi::ibv_qp, *mut ffi::ibv_send_wr, *mut *mut ffi::ibv_send_wr) -> c_int;
/// `ibv_context_ops::post_recv`.
pub(crate) type PostRecv =
    unsafe extern "C" fn(*mut ffi::ibv_qp, *mut ffi::ibv_recv_wr, *mut *mut ffi::ibv_recv_wr) -> c_int;
/// `ibv_context_ops::post_srq_recv`.
pub(crate) type PostSrqRecv =
    unsafe extern "C" fn(*mut ffi::ibv_srq, *mut ffi::ibv_recv_wr, *mut *mut ffi::ibv_recv_wr) -> c_int;
/// `ibv_context_ops::poll_cq`.
pub(crate) type PollCq = unsafe extern "C" fn(*mut ffi::ibv_cq, c_int, *mut ffi::ibv_wc) -> c_int;

/// A queue pair's posting functions.
#[derive(Clone, Copy)]
pub(crate) struct PostFns {
    pub(crate) post_send: PostSend,
    pub(crate) post_recv: PostRecv,
}

impl PostFns {
    /// The posting functions of the device context `ctx`.
    ///
    /// # Errors
    /// `Unsupported` if the provider has none.
    ///
    /// # Safety
    /// `ctx` is an open device context (rule V1).
    pub(crate) unsafe fn of(ctx: *mut ffi::ibv_context) -> Result<Self> {
        // SAFETY: [V1] per the contract the context is open; its operation table is filled in
        // before libibverbs hands the context out (rule V8).
        let ops = unsafe { &(*ctx).ops };
        match (ops.post_send, ops.post_recv) {
            (Some(post_send), Some(post_recv)) => Ok(Self { post_send, post_recv }),
            (None, _) => Err(missing("ibv_post_send")),
            (_, None) => Err(missing("ibv_post_recv")),
        }
    }
}

/// The polling function of the device context `ctx`.
///
/// # Errors
/// `Unsupported` if the provider has none.
///
/// # Safety
/// `ctx` is an open device context (rule V1).
pub(crate) unsafe fn poll_cq(ctx: *mut ffi::ibv_context) -> Result<PollCq> {
    // SAFETY: [V1, V8] as in `PostFns::of`.
    unsafe { (*ctx).ops.poll_cq }.ok_or_else(|| missing("ibv_poll_cq"))
}

/// The shared-receive-queue posting function of the device context `ctx`.
///
/// # Errors
/// `Unsupported` if the provider has none.
///
/// # Safety
/// `ctx` is an open device context (rule V1).
pub(crate) unsafe fn post_srq_recv(ctx: *mut ffi::ibv_context) -> Result<PostSrqRecv> {
    // SAFETY: [V1, V8] as in `PostFns::of`.
    unsafe { (*ctx).ops.post_srq_recv }.ok_or_else(|| missing("ibv_post_srq_recv"))
}

#[cold]
fn missing(op: &'static str) -> Error {
    Error::new(rpma_core::ErrorKind::Unsupported, op).with_detail("the provider does not implement it")
}
