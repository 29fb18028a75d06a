//! `rpma_conn_cfg_*`: every setting read and written atomically (librpma 1.0+); a request
//! reads the configuration when it is created.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use rpma_core::{ConnCfg, Error, ErrorKind};

use crate::backend::{on_backend, Backed, Backend, SrqCloneType};
use crate::ffi::{code, give, guard, handle, nonnull, put, take, CResult, E_INVAL};
use crate::log::librpma_log;
use crate::srq::RpmaSrq;

/// Where the defaults of a configuration are read: they are the same for every transport.
type Defaults = ConnCfg<rpma_mock::MockFabric>;

/// `struct rpma_conn_cfg`.
pub struct RpmaConnCfg {
    timeout_ms: AtomicI32,
    cq_size: AtomicU32,
    rcq_size: AtomicU32,
    sq_size: AtomicU32,
    rq_size: AtomicU32,
    shared: AtomicBool,
    /// The shared RQ set with `rpma_conn_cfg_set_srq`: a clone of it (which keeps it alive) and
    /// the handle to give back from `rpma_conn_cfg_get_srq` (never dereferenced here).
    srq: Mutex<Option<(Backed<SrqCloneType>, *mut RpmaSrq)>>,
}

impl RpmaConnCfg {
    /// The configuration as rpma-core takes it, for a request on backend `T` (`RPMA_E_INVAL`
    /// if its shared RQ is of another backend, which cannot be: a process has one).
    pub(crate) fn cfg<T: Backend>(&self) -> CResult<ConnCfg<T>> {
        let ms = u64::try_from(self.timeout_ms.load(Ordering::Acquire)).unwrap_or(0);
        let srq = self.srq.lock();
        let srq = match srq.as_ref() {
            Some((s, _)) => Some(T::get(s)?),
            None => None,
        };
        Ok(ConnCfg::new()
            .with_timeout(Duration::from_millis(ms))
            .with_cq_size(self.cq_size.load(Ordering::Acquire))
            .with_rcq_size(self.rcq_size.load(Ordering::Acquire))
            .with_sq_size(self.sq_size.load(Ordering::Acquire))
            .with_rq_size(self.rq_size.load(Ordering::Acquire))
            .with_shared_channel(self.shared.load(Ordering::Acquire))
            .with_srq(srq))
    }
}

/// The code of `e`, a failed `rpma_conn_req_new` / `rpma_ep_next_conn_req` (`func`) with `cfg`,
/// after librpma's ERROR line if it is the refusal librpma logs: a shared completion channel
/// with a shared RQ that has its own receive CQ.
///
/// # Safety
/// C2: `cfg` is NULL or a live configuration.
#[cold]
#[inline(never)]
pub(crate) unsafe fn refused<T: Backend>(cfg: *const RpmaConnCfg, func: &'static str, e: Error) -> c_int {
    // SAFETY: [C2] the caller's handle.
    if let Some(c) = unsafe { cfg.as_ref() } {
        let srq_rcq = c.srq.lock().as_ref().is_some_and(|(s, _)| T::get(s).is_ok_and(|s| s.rcq().is_some()));
        if e.kind() == ErrorKind::InvalidInput && c.shared.load(Ordering::Acquire) && srq_rcq {
            librpma_log!(
                Error,
                func,
                "connection shared completion channel cannot be used when the shared RQ has its own RCQ"
            );
        }
    }
    code(e)
}

/// The configuration behind `cfg`, or the defaults for NULL.
///
/// # Safety
/// C2: `cfg` is NULL or a live configuration.
pub(crate) unsafe fn cfg_or_default<T: Backend>(cfg: *const RpmaConnCfg) -> CResult<Option<ConnCfg<T>>> {
    // SAFETY: [C2] the caller's handle.
    unsafe { cfg.as_ref() }.map(RpmaConnCfg::cfg).transpose()
}

/// `rpma_conn_cfg_new`: a configuration with librpma's defaults.
///
/// # Safety
/// C1: `cfg_ptr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_cfg_new(cfg_ptr: *mut *mut RpmaConnCfg) -> c_int {
    guard(|| {
        nonnull(cfg_ptr)?;
        let ms = i32::try_from(Defaults::DEFAULT_TIMEOUT.as_millis()).unwrap_or(i32::MAX);
        let c = RpmaConnCfg {
            timeout_ms: AtomicI32::new(ms),
            cq_size: AtomicU32::new(Defaults::DEFAULT_CQ_SIZE),
            rcq_size: AtomicU32::new(Defaults::DEFAULT_RCQ_SIZE),
            sq_size: AtomicU32::new(Defaults::DEFAULT_SQ_SIZE),
            rq_size: AtomicU32::new(Defaults::DEFAULT_RQ_SIZE),
            shared: AtomicBool::new(false),
            srq: Mutex::new(None),
        };
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { give(cfg_ptr, c) };
        Ok(())
    })
}

/// `rpma_conn_cfg_delete`.
///
/// # Safety
/// C1/C2: `cfg_ptr` is NULL or a slot holding NULL or a live configuration.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_cfg_delete(cfg_ptr: *mut *mut RpmaConnCfg) -> c_int {
    // SAFETY: [C1, C2] the caller's slot.
    guard(|| unsafe { take(cfg_ptr) }.map(drop))
}

/// `rpma_conn_cfg_set_timeout`.
///
/// # Safety
/// C2: `cfg` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_cfg_set_timeout(cfg: *mut RpmaConnCfg, timeout_ms: c_int) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { handle(cfg) }?;
        if timeout_ms < 0 {
            return Err(E_INVAL);
        }
        c.timeout_ms.store(timeout_ms, Ordering::Release);
        Ok(())
    })
}

/// `rpma_conn_cfg_get_timeout`.
///
/// # Safety
/// C1/C2: `cfg` is NULL or live; `timeout_ms` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_cfg_get_timeout(cfg: *const RpmaConnCfg, timeout_ms: *mut c_int) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { handle(cfg) }?;
        nonnull(timeout_ms)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(timeout_ms, c.timeout_ms.load(Ordering::Acquire)) };
        Ok(())
    })
}

u32_setting!(RpmaConnCfg, cq_size, rpma_conn_cfg_set_cq_size, rpma_conn_cfg_get_cq_size);
u32_setting!(RpmaConnCfg, rcq_size, rpma_conn_cfg_set_rcq_size, rpma_conn_cfg_get_rcq_size);
u32_setting!(RpmaConnCfg, sq_size, rpma_conn_cfg_set_sq_size, rpma_conn_cfg_get_sq_size);
u32_setting!(RpmaConnCfg, rq_size, rpma_conn_cfg_set_rq_size, rpma_conn_cfg_get_rq_size);

/// `rpma_conn_cfg_set_compl_channel`.
///
/// # Safety
/// C2: `cfg` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_cfg_set_compl_channel(cfg: *mut RpmaConnCfg, shared: bool) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { handle(cfg) }?;
        c.shared.store(shared, Ordering::Release);
        Ok(())
    })
}

/// `rpma_conn_cfg_get_compl_channel`.
///
/// # Safety
/// C1/C2: `cfg` is NULL or live; `shared` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_cfg_get_compl_channel(cfg: *const RpmaConnCfg, shared: *mut bool) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { handle(cfg) }?;
        nonnull(shared)?;
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(shared, c.shared.load(Ordering::Acquire)) };
        Ok(())
    })
}

/// `rpma_conn_cfg_set_srq`: connections made with this configuration receive through `srq`
/// (NULL is `RPMA_E_INVAL`, as in librpma's code).
///
/// # Safety
/// C2: `cfg` and `srq` are NULL or live.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_cfg_set_srq(cfg: *mut RpmaConnCfg, srq: *mut RpmaSrq) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handles.
        let (c, s) = unsafe { (handle(cfg)?, handle(srq)?) };
        let clone = on_backend!(&s.srq, |T, lock srq| T::wrap::<SrqCloneType>(srq.clone()));
        *c.srq.lock() = Some((clone, srq));
        Ok(())
    })
}

/// `rpma_conn_cfg_get_srq`: the shared RQ set on the configuration, or NULL.
///
/// # Safety
/// C1, C2: `cfg` is NULL or live; `srq_ptr` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rpma_conn_cfg_get_srq(cfg: *const RpmaConnCfg, srq_ptr: *mut *mut RpmaSrq) -> c_int {
    guard(|| {
        // SAFETY: [C2] the caller's handle.
        let c = unsafe { handle(cfg) }?;
        nonnull(srq_ptr)?;
        let p = c.srq.lock().as_ref().map_or(std::ptr::null_mut(), |(_, p)| *p);
        // SAFETY: [C1] checked non-NULL out-parameter.
        unsafe { put(srq_ptr, p) };
        Ok(())
    })
}
