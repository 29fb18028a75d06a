//! Connection management (librdmacm): addresses, CM ids, event channels and device lookup; the
//! queue pairs, their send and receive queues, the completion queues those complete into,
//! listeners and shared receive queues built on them have a file each (what the queues share
//! when they post, chains of work requests: `chain`).

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys as ffi;

use rpma_core::{ContextType, Error, ErrorKind, Result};

use crate::sys::{call, errno, release, track};
use crate::{VerbsDevice, VerbsPd};

mod addr;
mod chain;
mod cq;
mod listener;
mod qp;
mod recv_queue;
mod send_queue;
mod srq;

pub use cq::{CqEvents, VerbsCq};
pub(crate) use listener::listen;
pub use listener::VerbsListener;
pub(crate) use qp::connect_request;
pub use qp::{SharedCqEvents, VerbsQp};
pub(crate) use srq::create_srq;
pub use srq::VerbsSrq;

/// `RAI_PASSIVE` of `<rdma/rdma_cma.h>` (a macro, not in the generated bindings).
const RAI_PASSIVE: i32 = 1;
/// Address and route resolution timeout of a device lookup (librpma's `RPMA_DEFAULT_TIMEOUT_MS`).
const LOOKUP_TIMEOUT_MS: i32 = 1000;
/// `RDMA_MAX_RESP_RES` / `RDMA_MAX_INIT_DEPTH`: let librdmacm use the device's limits.
const RDMA_MAX_RESP_RES: u8 = 0xFF;
const RDMA_MAX_INIT_DEPTH: u8 = 0xFF;

/// The 8-byte destination of the emulated flush's RDMA Read.
fn flush_buffer() -> Result<rpma_mem::Memory> {
    rpma_mem::Memory::page_aligned(8)
        .map_err(|e| Error::new(ErrorKind::OutOfMemory, "ConnReq::new").with_detail(&e.to_string()))
}

fn cstring(op: &'static str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::provider(op, libc::EINVAL).with_detail("string contains a NUL byte"))
}

/// The result of `rdma_getaddrinfo`, freed on drop.
struct AddrInfo(NonNull<ffi::rdma_addrinfo>);

impl AddrInfo {
    fn new(addr: &str, port: Option<&str>, passive: bool) -> Result<Self> {
        const OP: &str = "rdma_getaddrinfo";
        let node = cstring(OP, addr)?;
        let service = port.map(|p| cstring(OP, p)).transpose()?;
        let mut hints = std::mem::MaybeUninit::<ffi::rdma_addrinfo>::zeroed();
        // SAFETY: [V2] zeroed is a valid `rdma_addrinfo` (null pointers, zero lengths); we set two
        // plain integer fields.
        let hints = unsafe {
            let h = hints.as_mut_ptr();
            (*h).ai_port_space = ffi::rdma_port_space::RDMA_PS_TCP as i32;
            if passive {
                (*h).ai_flags = RAI_PASSIVE;
            }
            hints.assume_init()
        };
        let mut res: *mut ffi::rdma_addrinfo = std::ptr::null_mut();
        // SAFETY: [V2] valid NUL-terminated strings (or null service), valid hints and out-pointer.
        let r = call!("rdma_getaddrinfo", -1, unsafe {
            ffi::rdma_getaddrinfo(
                node.as_ptr(),
                service.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
                &hints,
                &mut res,
            )
        });
        if r != 0 {
            let e = if r == -1 { errno() } else { libc::EINVAL };
            return Err(Error::provider(OP, e).with_detail(&format!("cannot translate {addr}")));
        }
        let ai = NonNull::new(res).map(Self).ok_or_else(|| Error::provider(OP, libc::ENOENT))?;
        track!(AddrInfo, 1);
        Ok(ai)
    }

    fn src(&self) -> *mut libc::sockaddr {
        // SAFETY: [V1] a list returned by `rdma_getaddrinfo`, alive until drop.
        unsafe { (*self.0.as_ptr()).ai_src_addr }
    }

    fn dst(&self) -> *mut libc::sockaddr {
        // SAFETY: [V1] as in `src`.
        unsafe { (*self.0.as_ptr()).ai_dst_addr }
    }
}

impl Drop for AddrInfo {
    fn drop(&mut self) {
        // SAFETY: [V1] returned by `rdma_getaddrinfo`, freed once.
        unsafe { ffi::rdma_freeaddrinfo(self.0.as_ptr()) };
        track!(AddrInfo, -1);
    }
}

/// An owned CM event channel (destroyed on drop unless taken).
struct EventChannel(NonNull<ffi::rdma_event_channel>);

impl EventChannel {
    fn new() -> Result<Self> {
        // SAFETY: [V2] no preconditions.
        let ch = call!("rdma_create_event_channel", std::ptr::null_mut(), unsafe { ffi::rdma_create_event_channel() });
        let ch = NonNull::new(ch).map(Self).ok_or_else(|| Error::provider("rdma_create_event_channel", errno()))?;
        track!(EventChannel, 1);
        Ok(ch)
    }

    fn into_raw(self) -> NonNull<ffi::rdma_event_channel> {
        let p = self.0;
        std::mem::forget(self);
        p
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: [V1] created by us, no id uses it any more (ids are destroyed first), once.
        unsafe { ffi::rdma_destroy_event_channel(self.0.as_ptr()) };
        track!(EventChannel, -1);
    }
}

/// An owned CM id (destroyed on drop unless taken).
///
/// librdmacm counts the CM ids bound to a device (`ucma_get_device`/`ucma_put_device` in
/// `cma.c`): while one exists, the device context it opened stays open, even if the device is
/// removed (it is then closed when the count drops to zero). A [`VerbsDevice`] holds the id of
/// its lookup in an `Arc` for that reason (rule V1).
pub(crate) struct CmId(NonNull<ffi::rdma_cm_id>);

// SAFETY: [V3] librdmacm's calls on an id are thread-safe; the id is only destroyed by `Drop`.
unsafe impl Send for CmId {}
// SAFETY: [V3] as above; a shared `CmId` is never used for anything but keeping it alive.
unsafe impl Sync for CmId {}

impl CmId {
    /// `rdma_create_id` on `channel` (synchronous mode if null).
    fn new(channel: *mut ffi::rdma_event_channel) -> Result<Self> {
        let mut id: *mut ffi::rdma_cm_id = std::ptr::null_mut();
        // SAFETY: [V2] `channel` is a live channel or null; valid out-pointer.
        let r = call!("rdma_create_id", -1, unsafe {
            ffi::rdma_create_id(channel, &mut id, std::ptr::null_mut(), ffi::rdma_port_space::RDMA_PS_TCP)
        });
        if r != 0 {
            return Err(Error::provider("rdma_create_id", errno()));
        }
        let id = NonNull::new(id).map(Self).ok_or_else(|| Error::provider("rdma_create_id", libc::EIO))?;
        track!(CmId, 1);
        Ok(id)
    }

    fn into_raw(self) -> NonNull<ffi::rdma_cm_id> {
        let p = self.0;
        std::mem::forget(self);
        p
    }

    fn verbs(&self) -> *mut ffi::ibv_context {
        // SAFETY: [V1] a live id.
        unsafe { (*self.0.as_ptr()).verbs }
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: [V1] a live id whose events were all acked, destroyed once.
        let r = release!(CmId: "rdma_destroy_id", -1, unsafe { ffi::rdma_destroy_id(self.0.as_ptr()) });
        if r != 0 {
            rpma_core::rpma_log!(Error, "rdma_destroy_id failed: errno {}", errno());
        }
    }
}

/// librdmacm's device list (`rdma_get_devices`): while it is not freed, librdmacm keeps every
/// context in it open (the list takes a reference on each device, `rdma_free_devices` drops
/// them; rdma-core's `cma.c`).
pub(crate) struct DeviceList {
    list: NonNull<*mut ffi::ibv_context>,
    len: usize,
}

// SAFETY: [V3] the list is only read (and freed once, by `Drop`); librdmacm's calls are
// thread-safe.
unsafe impl Send for DeviceList {}
// SAFETY: [V3] as above.
unsafe impl Sync for DeviceList {}

impl DeviceList {
    pub(crate) fn get() -> Result<Self> {
        let mut n: std::ffi::c_int = 0;
        // SAFETY: [V2] a valid out-pointer for the count.
        let list = call!("rdma_get_devices", std::ptr::null_mut(), unsafe { ffi::rdma_get_devices(&mut n) });
        let list = NonNull::new(list).ok_or_else(|| Error::provider("rdma_get_devices", errno()))?;
        Ok(Self { list, len: usize::try_from(n).unwrap_or(0) })
    }

    /// The open contexts of the list.
    pub(crate) fn iter(&self) -> impl Iterator<Item = NonNull<ffi::ibv_context>> + '_ {
        // SAFETY: [V1] the list holds `len` context pointers (then a NULL) until it is freed,
        // which only `Drop` does.
        let entries = unsafe { std::slice::from_raw_parts(self.list.as_ptr(), self.len) };
        entries.iter().filter_map(|c| NonNull::new(*c))
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: [V1] the list `rdma_get_devices` returned, freed once.
        unsafe { ffi::rdma_free_devices(self.list.as_ptr()) };
    }
}

/// `rpma_utils_get_ibv_context`.
pub(crate) fn lookup_device(addr: &str, kind: ContextType) -> Result<VerbsDevice> {
    crate::fork_setup();
    crate::native::init_env();
    let ai = AddrInfo::new(addr, None, kind == ContextType::Local)?;
    let id = CmId::new(std::ptr::null_mut())?;
    match kind {
        ContextType::Local => {
            // SAFETY: [V1, V2] a live id and the address `rdma_getaddrinfo` returned.
            if call!("rdma_bind_addr", -1, unsafe { ffi::rdma_bind_addr(id.0.as_ptr(), ai.src()) }) != 0 {
                return Err(Error::provider("rdma_bind_addr", errno()));
            }
        }
        ContextType::Remote => {
            // SAFETY: [V1, V2] as above; a synchronous id, so this waits for the resolution.
            if call!("rdma_resolve_addr", -1, unsafe {
                ffi::rdma_resolve_addr(id.0.as_ptr(), ai.src(), ai.dst(), LOOKUP_TIMEOUT_MS)
            }) != 0
            {
                return Err(Error::provider("rdma_resolve_addr", errno()));
            }
        }
    }
    let ctx = NonNull::new(id.verbs()).ok_or_else(|| {
        Error::provider(if kind == ContextType::Local { "rdma_bind_addr" } else { "rdma_resolve_addr" }, libc::ENODEV)
            .with_detail("no RDMA device for this address")
    })?;
    // SAFETY: [V1] a live id.
    let port = unsafe { (*id.0.as_ptr()).port_num };
    // The id keeps librdmacm's reference on the device, hence the context, for as long as the
    // device handle or anything made from it lives (see `CmId`).
    Ok(VerbsDevice { ctx, port, _anchor: Arc::new(crate::Anchor::Id(id)) })
}

fn check_device(pd: &VerbsPd, ctx: *mut ffi::ibv_context, op: &'static str) -> Result<()> {
    if ctx.is_null() || ctx == pd.device().ctx() {
        Ok(())
    } else {
        Err(Error::provider(op, libc::EADDRNOTAVAIL).with_detail("the address belongs to another device"))
    }
}

/// Takes the next event of a CM event channel: (type, status, private data, id, listen id).
/// The event is acked before returning unless `keep` says otherwise for its type.
struct RawEvent {
    ev: NonNull<ffi::rdma_cm_event>,
}

impl RawEvent {
    fn get(ch: NonNull<ffi::rdma_event_channel>) -> Result<Self> {
        const OP: &str = "rdma_get_cm_event";
        let mut ev: *mut ffi::rdma_cm_event = std::ptr::null_mut();
        // SAFETY: [V1, V2] a live channel and a valid out-pointer.
        if call!("rdma_get_cm_event", -1, unsafe { ffi::rdma_get_cm_event(ch.as_ptr(), &mut ev) }) != 0 {
            return Err(match errno() {
                libc::ENODATA | libc::EAGAIN => Error::new(ErrorKind::NoEvent, OP),
                e => Error::provider(OP, e),
            });
        }
        NonNull::new(ev).map(|ev| Self { ev }).ok_or_else(|| Error::provider(OP, libc::EIO))
    }

    fn kind(&self) -> u32 {
        // SAFETY: [V2] an event not yet acked.
        unsafe { (*self.ev.as_ptr()).event }
    }

    fn id(&self) -> *mut ffi::rdma_cm_id {
        // SAFETY: [V2] as above.
        unsafe { (*self.ev.as_ptr()).id }
    }

    fn private_data(&self) -> Box<[u8]> {
        // SAFETY: [V2] for connection events the union holds `conn`; its private data pointer and
        // length come from librdmacm and are valid until the event is acked.
        unsafe {
            let c = &(*self.ev.as_ptr()).param.conn;
            if c.private_data.is_null() || c.private_data_len == 0 {
                Box::new([])
            } else {
                std::slice::from_raw_parts(c.private_data.cast::<u8>(), usize::from(c.private_data_len)).into()
            }
        }
    }

    fn ack(self) -> Result<()> {
        // SAFETY: [V1] acked once (consumes self).
        let r = release!("rdma_ack_cm_event", -1, unsafe { ffi::rdma_ack_cm_event(self.ev.as_ptr()) });
        if r == 0 {
            Ok(())
        } else {
            Err(Error::provider("rdma_ack_cm_event", errno()))
        }
    }
}

/// The parameters of `rdma_connect`/`rdma_accept`: librpma's, with the connection's transport
/// retry count (librpma's is always 7; `rdma_accept` ignores it).
fn conn_param(pdata: Option<&[u8]>, retry_count: u8) -> ffi::rdma_conn_param {
    let (ptr, len) =
        pdata.map_or((std::ptr::null(), 0), |p| (p.as_ptr().cast(), u8::try_from(p.len()).unwrap_or(u8::MAX)));
    ffi::rdma_conn_param {
        private_data: ptr,
        private_data_len: len,
        responder_resources: RDMA_MAX_RESP_RES,
        initiator_depth: RDMA_MAX_INIT_DEPTH,
        flow_control: 1,
        retry_count,
        rnr_retry_count: 7,
        srq: 0,
        qp_num: 0,
    }
}
