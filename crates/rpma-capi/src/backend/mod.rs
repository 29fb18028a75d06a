//! The backend chosen by `RPMA_BACKEND` (read once, at the first call that needs one), and the
//! handles' link to it.
//!
//! Every handle that holds a backend object (peer, region, endpoint, request, connection,
//! shared RQ, device) holds it as a [`Backed`], `rpma::any`'s `AnyOf`: the object of the backend
//! it was made on, typed by that backend. A function taking handles dispatches once on the
//! variant of its first handle ([`on_backend!`], the one way from a handle to its object) and
//! runs its body with the concrete transport (`MockFabric` or `Verbs`): static dispatch below
//! that point, no boxing, nothing allocated or locked beyond what the body does. Only one backend
//! is ever chosen in a process, so every handle is of it; a handle of another backend (which
//! cannot exist) would be `RPMA_E_INVAL`, never a cast. The backends are `rpma::any`'s
//! ([`any::Backend`], [`AnyTransport`]): this library has no enumeration of its own.

pub(crate) mod device;

use std::sync::OnceLock;

use parking_lot::{Mutex, MutexGuard};

use rpma_core::{rpma_log, Conn, ConnReq, Device, Ep, MrLocal, Peer, Srq, Transport};
use rpma_facade::any::{self, AnyOf, AnyTransport, PerTransport, BACKEND_ENV};
use rpma_mock::MockFabric;
#[cfg(feature = "verbs")]
use rpma_verbs::Verbs;

use crate::ffi::{CResult, E_INVAL};

/// The object a handle holds, of the backend it was made on: one of rpma-core's types that are
/// generic over the transport (e.g. `Peer<T>`, the family `C`: [`PeerType`]) on that backend.
/// Only [`Backend::wrap`] makes one, for a backend of this library; the facade may have one more
/// (a workspace build can give `rpma` verbs without this crate's `verbs`), whose variant no
/// handle holds.
pub(crate) type Backed<C> = AnyOf<C>;

/// A wait for a CQ's completion events that runs without the handle's lock
/// ([`Backend::unlocked_wait`]).
pub(crate) enum UnlockedWait {
    /// The CQ's own completion channel on verbs.
    #[cfg(feature = "verbs")]
    Verbs(rpma_verbs::CqEvents),
}

impl UnlockedWait {
    /// Takes one completion event, acks it and re-arms the CQ (`rpma_cq_wait`).
    ///
    /// # Errors
    /// As [`rpma_core::Cq::wait`].
    ///
    /// # Safety
    /// C2: the CQ this came from lives until this returns (its handle is not deleted while a
    /// thread uses it).
    pub(crate) unsafe fn wait(&self) -> rpma_core::Result<()> {
        match *self {
            #[cfg(feature = "verbs")]
            // SAFETY: [C2] the caller's promise is the one CqEvents::wait asks for.
            Self::Verbs(ref e) => unsafe { e.wait() },
        }
    }
}

/// A wait for the events of a connection's shared completion channel that runs without the
/// handle's lock ([`Backend::unlocked_conn_wait`]).
pub(crate) enum UnlockedConnWait {
    /// The connection's shared channel on verbs.
    #[cfg(feature = "verbs")]
    Verbs(rpma_verbs::SharedCqEvents),
}

impl UnlockedConnWait {
    /// Takes one completion event, acks it, re-arms the CQ that fired and says whether it is
    /// the receive CQ (`rpma_conn_wait`).
    ///
    /// # Errors
    /// As [`rpma_core::Conn::wait`].
    ///
    /// # Safety
    /// C2: the connection this came from lives until this returns (its handle is not deleted
    /// while a thread uses it).
    pub(crate) unsafe fn wait(&self) -> rpma_core::Result<bool> {
        match *self {
            #[cfg(feature = "verbs")]
            // SAFETY: [C2] the caller's promise is the one SharedCqEvents::wait asks for.
            Self::Verbs(ref e) => unsafe { e.wait() }
                .map(|slot| slot == rpma_core::transport::CqSlot::Receive)
                .map_err(|e| e.in_op("Conn::wait")),
        }
    }
}

/// A transport this library can run on: how a handle's [`Backed`] holds its objects.
pub(crate) trait Backend: Transport {
    /// The object of `b`, if it was made on this backend (else `RPMA_E_INVAL`).
    fn get<C: PerTransport>(b: &Backed<C>) -> CResult<&C::On<Self>>;
    /// `v` as a handle's object.
    fn wrap<C: PerTransport>(v: C::On<Self>) -> Backed<C>;
    /// How `rpma_cq_wait` may take `cq`'s events without the handle's lock, if the backend's
    /// calls for it are thread-safe (verbs); `None`: it waits under the lock, sleeping without
    /// it ([`crate::wait`]; the mock, whose CQ is not `Sync`).
    fn unlocked_wait(cq: &rpma_core::Cq<'_, Self>) -> Option<UnlockedWait>;
    /// How `rpma_conn_wait` may take the events of `conn`'s shared completion channel without
    /// the handle's lock (verbs); `None`: under the lock, as [`Backend::unlocked_wait`].
    fn unlocked_conn_wait(conn: &Conn<Self>) -> Option<UnlockedConnWait>;
}

impl Backend for MockFabric {
    fn get<C: PerTransport>(b: &Backed<C>) -> CResult<&C::On<Self>> {
        #[allow(unreachable_patterns)]
        match b {
            Backed::Mock(v) => Ok(v),
            _ => Err(E_INVAL),
        }
    }
    fn wrap<C: PerTransport>(v: C::On<Self>) -> Backed<C> {
        Backed::Mock(v)
    }
    fn unlocked_wait(_: &rpma_core::Cq<'_, Self>) -> Option<UnlockedWait> {
        None
    }
    fn unlocked_conn_wait(_: &Conn<Self>) -> Option<UnlockedConnWait> {
        None
    }
}

#[cfg(feature = "verbs")]
impl Backend for Verbs {
    fn get<C: PerTransport>(b: &Backed<C>) -> CResult<&C::On<Self>> {
        match b {
            Backed::Verbs(v) => Ok(v),
            _ => Err(E_INVAL),
        }
    }
    fn wrap<C: PerTransport>(v: C::On<Self>) -> Backed<C> {
        Backed::Verbs(v)
    }
    fn unlocked_wait(cq: &rpma_core::Cq<'_, Self>) -> Option<UnlockedWait> {
        cq.backend().events().map(UnlockedWait::Verbs)
    }
    fn unlocked_conn_wait(conn: &Conn<Self>) -> Option<UnlockedConnWait> {
        conn.backend().shared_events().map(UnlockedConnWait::Verbs)
    }
}

/// Locks `m`, the lock of a request, connection or shared RQ handle.
///
/// `parking_lot`'s lock, not `std`'s: on the data path (every post and poll of the C API takes
/// it) its uncontended lock and unlock are one compare-and-swap each, without `std`'s poison
/// bookkeeping; a panic caught at the C boundary (which only a bug can raise) leaves the object
/// as it is, as a poisoned `std` lock taken over would.
#[inline(always)]
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock()
}

/// The one way from a handle to its object, on the backend it was made on:
///
/// - `on_backend!(held, |T, v| body)`: `v` is the object in `held` (a [`Backed`], by value or by
///   reference) and the type alias `T` names its backend's transport (`MockFabric` or `Verbs`);
/// - `on_backend!(held, |T, lock v| body)`: the same for an object behind a lock (request,
///   connection, shared RQ), `v` its guard, held until `body` ends;
/// - `on_backend!(kind k, |T| body)`: `T` for the [`any::Backend`] `k` (a CQ's owner, known
///   before its object is reached).
///
/// One match on the variant, then static dispatch: `body` is compiled once per backend, with
/// nothing boxed, allocated or locked beyond what it does. Another handle of the same call is
/// reached in `body` with `T::get` (a handle of another backend, which cannot exist in a
/// process, would be `RPMA_E_INVAL`).
macro_rules! on_backend {
    ($held:expr, |$T:ident, lock $v:ident| $body:expr) => {
        $crate::backend::on_backend!($held, |$T, locked| {
            let $v = $crate::backend::lock(locked);
            $body
        })
    };
    ($held:expr, |$T:ident, $v:ident| $body:expr) => {
        match $held {
            $crate::backend::Backed::Mock($v) => {
                #[allow(dead_code)]
                type $T = ::rpma_mock::MockFabric;
                $body
            }
            #[cfg(feature = "verbs")]
            $crate::backend::Backed::Verbs($v) => {
                #[allow(dead_code)]
                type $T = ::rpma_verbs::Verbs;
                $body
            }
            #[allow(unreachable_patterns)]
            _ => $crate::backend::not_of_this_library(),
        }
    };
    (kind $kind:expr, |$T:ident| $body:expr) => {
        match $kind {
            ::rpma_facade::any::Backend::Mock => {
                type $T = ::rpma_mock::MockFabric;
                $body
            }
            #[cfg(feature = "verbs")]
            ::rpma_facade::any::Backend::Verbs => {
                type $T = ::rpma_verbs::Verbs;
                $body
            }
            #[allow(unreachable_patterns)]
            _ => $crate::backend::not_of_this_library(),
        }
    };
}
pub(crate) use on_backend;

/// The arm of [`on_backend!`] for a backend this library was built without: no handle holds an
/// object of one ([`Backend::wrap`] makes them all, and [`chosen`] refuses such a backend).
#[cold]
pub(crate) fn not_of_this_library() -> ! {
    unreachable!("a handle of a backend this library was built without")
}

/// `Peer<T>`.
pub(crate) struct PeerType;
impl PerTransport for PeerType {
    type On<T: Transport> = Peer<T>;
}
/// `MrLocal<T>`.
pub(crate) struct MrType;
impl PerTransport for MrType {
    type On<T: Transport> = MrLocal<T>;
}
/// `Ep<T>`.
pub(crate) struct EpType;
impl PerTransport for EpType {
    type On<T: Transport> = Ep<T>;
}
/// `ConnReq<T>` behind a lock.
pub(crate) struct ReqType;
impl PerTransport for ReqType {
    type On<T: Transport> = Mutex<ConnReq<T>>;
}
/// `Conn<T>` behind a lock.
pub(crate) struct ConnType;
impl PerTransport for ConnType {
    type On<T: Transport> = Mutex<Conn<T>>;
}
/// `Srq<T>` behind a lock.
pub(crate) struct SrqType;
impl PerTransport for SrqType {
    type On<T: Transport> = Mutex<Srq<T>>;
}
/// `Srq<T>` (a clone kept by a connection configuration).
pub(crate) struct SrqCloneType;
impl PerTransport for SrqCloneType {
    type On<T: Transport> = Srq<T>;
}
/// `Device<T>`.
pub(crate) struct DeviceType;
impl PerTransport for DeviceType {
    type On<T: Transport> = Device<T>;
}

/// The locks of [`ReqType`], [`ConnType`] and [`SrqType`] make the handles `Sync` only if what
/// they hold may move between threads.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Conn<MockFabric>>();
    send::<ConnReq<MockFabric>>();
    send::<Srq<MockFabric>>();
    #[cfg(feature = "verbs")]
    {
        send::<Conn<Verbs>>();
        send::<ConnReq<Verbs>>();
        send::<Srq<Verbs>>();
    }
};

static BACKEND: OnceLock<Result<AnyTransport, String>> = OnceLock::new();

/// `RPMA_MOCK_FAULT=NAME:NTH[:ERRNO]`: the `NTH` call (1-based, from the first use of the
/// library) of the mock's provider call `NAME` (e.g. `ibv_req_notify_cq`, `ibv_post_send`,
/// `rdma_connect`) fails with `ERRNO` (default `EIO`); unset: no fault.
const FAULT_ENV: &str = "RPMA_MOCK_FAULT";

/// Arms the fault `RPMA_MOCK_FAULT` describes, if set, on `fabric`.
fn arm_fault(fabric: &MockFabric) -> Result<(), String> {
    let Some(v) = std::env::var_os(FAULT_ENV) else {
        return Ok(());
    };
    let bad = |why: &str| format!("{FAULT_ENV}={}: {why} (expected NAME:NTH[:ERRNO], NTH >= 1)", v.to_string_lossy());
    let s = v.to_str().ok_or_else(|| bad("not UTF-8"))?;
    let mut parts = s.split(':');
    let (name, nth, errno) = (parts.next(), parts.next(), parts.next().unwrap_or("5"));
    let (Some(name), Some(nth), None) = (name.filter(|n| !n.is_empty()), nth, parts.next()) else {
        return Err(bad("not NAME:NTH[:ERRNO]"));
    };
    let nth: u64 = nth.parse().ok().filter(|n| *n >= 1).ok_or_else(|| bad("NTH is not a positive number"))?;
    let errno: i32 = errno.parse().ok().filter(|e| *e > 0).ok_or_else(|| bad("ERRNO is not a positive number"))?;
    // The fault plan keeps the name for the process's life (set once, at the first use).
    let name: &'static str = Box::leak(name.to_owned().into_boxed_str());
    fabric.faults().fail_nth(nth, errno, Some(name));
    Ok(())
}

/// The backend `RPMA_BACKEND` names (unset or empty: verbs, librpma's only one), opened by
/// `rpma::any`; the mock with the fault `RPMA_MOCK_FAULT` describes armed. `Err`: the ERROR line
/// saying why none can be used.
fn choose() -> Result<AnyTransport, String> {
    let backend = any::Backend::from_env_or(any::Backend::Verbs).map_err(|e| e.to_string())?;
    let named = || match std::env::var_os(BACKEND_ENV) {
        Some(v) if !v.is_empty() => format!("{BACKEND_ENV}={backend}"),
        _ => format!("{BACKEND_ENV} is unset and its default is {backend}"),
    };
    // The mock: the default builder, background progress on, also in the deferred mode
    // (`RPMA_MOCK_MODE=deferred`), so an fd becomes readable without anyone calling into the
    // mock, which the blocking waits rely on (crate::wait).
    let opened = backend.open().map_err(|e| match e {
        any::Error::NotCompiledIn { .. } => format!("{}: {e}; or use RPMA_BACKEND=mock", named()),
        any::Error::Open { ref source, .. } => format!("{}: {e}: {source}", named()),
        e => format!("{}: {e}", named()),
    });
    match opened? {
        AnyTransport::Mock(fabric) => {
            arm_fault(&fabric)?;
            Ok(AnyTransport::Mock(fabric))
        }
        #[cfg(feature = "verbs")]
        verbs @ AnyTransport::Verbs(_) => Ok(verbs),
        // `rpma` has verbs (another crate of the build asked for it), this library does not.
        #[allow(unreachable_patterns)]
        _ => Err(format!(
            "{}: the {backend} backend is not compiled into this librpma: rebuild it with the cargo feature `verbs`",
            named()
        )),
    }
}

/// The process's backend, one this library was built with; `RPMA_E_PROVIDER` (and an ERROR log
/// line) if `RPMA_BACKEND` names no usable one.
pub(crate) fn chosen() -> CResult<&'static AnyTransport> {
    match BACKEND.get_or_init(choose) {
        Ok(f) => Ok(f),
        Err(msg) => {
            rpma_log!(Error, "{msg}");
            Err(crate::ffi::E_PROVIDER)
        }
    }
}
