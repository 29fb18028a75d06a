//! Completion queues: `struct rpma_cq` (a connection's main or receive CQ, or a shared RQ's
//! receive CQ) and `rpma_cq_get_fd`, `rpma_cq_wait`, `rpma_cq_get_wc`.

use std::ffi::c_int;
use std::os::fd::AsRawFd;

use parking_lot::MutexGuard;
use rpma_core::transport::Transport;
use rpma_core::{Conn, Cq, Srq, Wc};

use crate::backend::{lock, on_backend, Backed, Backend, ConnType, SrqType};
use crate::ffi::{code, guard, handle, nonnull, put, CResult, E_INVAL, E_NO_COMPLETION, E_UNKNOWN};
use crate::log::guard_deferring_log;
use crate::wait::{blocking, turn};

/// `struct rpma_cq`: the main or the receive CQ of a connection, or the receive CQ of a shared
/// RQ. It lives inside its owner's handle (`RpmaConn`, `RpmaSrq`) and points back at the
/// owner's object, which never moves (the owner is boxed).
pub struct RpmaCq {
    owner: CqOwner,
}

enum CqOwner {
    Conn { conn: *const Backed<ConnType>, rcq: bool },
    Srq(*const Backed<SrqType>),
}

impl RpmaCq {
    /// The main (`rcq` false) or receive CQ of the connection at `conn` (which must not move
    /// while this handle lives; NULL until the owner's box is made, see `RpmaConn::boxed`).
    pub(crate) const fn of_conn(conn: *const Backed<ConnType>, rcq: bool) -> Self {
        Self { owner: CqOwner::Conn { conn, rcq } }
    }

    /// The receive CQ of the shared RQ at `srq` (which must not move while this handle lives).
    pub(crate) const fn of_srq(srq: *const Backed<SrqType>) -> Self {
        Self { owner: CqOwner::Srq(srq) }
    }

    /// The backend of the CQ's owner.
    ///
    /// # Safety
    /// C2: as for [`RpmaCq::with`].
    unsafe fn backend(&self) -> rpma_facade::any::Backend {
        match self.owner {
            // SAFETY: [C2] the connection outlives the CQ handles inside it.
            CqOwner::Conn { conn, .. } => unsafe { &*conn }.backend(),
            // SAFETY: [C2] the shared RQ outlives the CQ handle inside it.
            CqOwner::Srq(srq) => unsafe { &*srq }.backend(),
        }
    }

    /// Runs `f` on the CQ with its owner's lock held.
    ///
    /// # Safety
    /// C2: the CQ handle is used only while its owner lives (librpma's rule: a CQ is its
    /// connection's or shared RQ's and goes with `rpma_conn_delete` / `rpma_srq_delete`).
    #[inline(always)]
    unsafe fn with<T: Backend, R>(&self, f: impl FnOnce(&Cq<'_, T>) -> CResult<R>) -> CResult<R> {
        // The owner locked first, then its CQ taken: `f` has one call site (and is inlined into
        // it, so a poll on verbs runs in the entry point's frame).
        let owner = match self.owner {
            // SAFETY: [C2] the connection outlives the CQ handles inside it.
            CqOwner::Conn { conn, rcq } => Locked::Conn(lock(T::get(unsafe { &*conn })?), rcq),
            // SAFETY: [C2] the shared RQ outlives the CQ handle inside it.
            CqOwner::Srq(srq) => Locked::Srq(lock(T::get(unsafe { &*srq })?)),
        };
        let q = match &owner {
            Locked::Conn(conn, false) => conn.cq(),
            Locked::Conn(conn, true) => conn.rcq().ok_or(E_UNKNOWN)?,
            Locked::Srq(srq) => srq.rcq().ok_or(E_UNKNOWN)?,
        };
        f(&q)
    }
}

/// A CQ's owner, locked (see [`RpmaCq::with`]); the flag: the connection's receive CQ.
enum Locked<'a, T: Transport> {
    Conn(MutexGuard<'a, Conn<T>>, bool),
    Srq(MutexGuard<'a, Srq<T>>),
}

/// Runs `$body` with `$q` the CQ behind `$cq` (an `RpmaCq` of a live connection or shared
/// RQ: C2, the caller's `unsafe` promise), its owner locked, and `$T` its backend's transport.
macro_rules! on_cq {
    ($cq:expr, |$T:ident, $q:ident| $body:expr) => {{
        let cq: &RpmaCq = $cq;
        // SAFETY: [C2] the caller's handle, inside a live connection or shared RQ.
        on_backend!(kind unsafe { cq.backend() }, |$T| unsafe { cq.with::<$T, _>(|$q| $body) })
    }};
}

/// `rpma_cq_get_fd`.
///
/// # Safety
/// C1/C2: `cq` is NULL or live; `fd` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_cq_get_fd(cq: *const RpmaCq, fd: *mut c_int) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handle.
        let cq = unsafe { handle(cq) }?;
        let raw = on_cq!(cq, |T, q| Ok(q.fd().as_raw_fd()))?;
        nonnull(fd)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(fd, raw) };
        Ok(())
    })
}

/// `rpma_cq_wait`: sleeps without the owner's lock (other threads post and poll while this
/// one waits). On verbs it takes the event as librpma does, outside the lock (libibverbs' calls
/// are thread-safe); on the mock it sleeps in `poll(2)` and takes the event under the lock
/// ([`crate::wait`]).
///
/// # Safety
/// C2: `cq` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rpma_cq_wait(cq: *mut RpmaCq) -> c_int {
    guard_deferring_log(|| {
        // SAFETY: [C2] the caller's handle.
        let cq = unsafe { handle(cq) }?;
        // SAFETY: [C2] inside a live connection or shared RQ.
        on_backend!(kind unsafe { cq.backend() }, |T| {
            // SAFETY: [C2] as above.
            let unlocked = unsafe {
                cq.with::<T, _>(|q| {
                    if q.is_shared() {
                        // `wait` refuses it at once (librpma: RPMA_E_SHARED_CHANNEL).
                        return q.wait().map(|()| None).map_err(code);
                    }
                    Ok(T::unlocked_wait(q))
                })
            }?;
            if let Some(w) = unlocked {
                // SAFETY: [C2] the handle, and with it its CQ, lives until this call returns.
                return unsafe { w.wait() }.map_err(code);
            }
            // (The channel is not shared: refused above.)
            // SAFETY: [C2] the caller's handle.
            blocking(|| unsafe { cq.with::<T, _>(|q| turn(q.fd().as_raw_fd(), || q.wait())) })
        })
    })
}

/// `rpma_cq_get_wc`: up to `num_entries` completions into `wc` (`struct ibv_wc`, the layout of
/// [`Wc`]); `RPMA_E_NO_COMPLETION` if there is none.
///
/// # Safety
/// C1/C2: `cq` is NULL or live; `wc` is NULL or writable for `num_entries` entries;
/// `num_entries_got` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_cq_get_wc(
    cq: *mut RpmaCq,
    num_entries: c_int,
    wc: *mut Wc,
    num_entries_got: *mut c_int,
) -> c_int {
    guard(|| {
        // librpma's checks, all before anything else: every one is `RPMA_E_INVAL`. One entry
        // (the common case) takes one compare; any other count is checked apart.
        if wc.is_null() || (num_entries != 1 && (num_entries < 1 || num_entries_got.is_null())) {
            return Err(E_INVAL);
        }
        let n = num_entries.unsigned_abs() as usize;
        // SAFETY: [C1, V7] wc is writable for num_entries entries of struct ibv_wc, whose layout
        // Wc has (rpma_core::WC_LAYOUT); every bit pattern is a valid Wc. The caller's array may
        // be uninitialised: no entry is read before the backend wrote it, and of an entry the
        // provider wrote only `wr_id`, which every completion has, is read (V7).
        let wc = unsafe { std::slice::from_raw_parts_mut(wc, n) };
        // SAFETY: [C2] the caller's handle.
        let cq = unsafe { handle(cq) }?;
        let got = on_cq!(cq, |T, q| q.poll(wc).map_err(code))?;
        if got == 0 {
            return Err(E_NO_COMPLETION);
        }
        if !num_entries_got.is_null() {
            // SAFETY: [C1] non-NULL out-parameter. `got <= num_entries` (rpma-core refuses a
            // backend's larger answer), so the cast to `c_int` is exact.
            unsafe { put(num_entries_got, got as c_int) };
        }
        Ok(())
    })
}
