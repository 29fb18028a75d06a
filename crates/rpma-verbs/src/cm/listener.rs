//! A listening endpoint and the connection requests it takes.

use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rdma_sys as ffi;
use rpma_core::transport::{CmBackend, ListenerBackend, QueueConfig};

use rpma_core::{Error, Result};

use crate::sys::{call, errno, release, track};
use crate::{Verbs, VerbsPd};

use super::qp::{build_qp, VerbsQp};
use super::{check_device, AddrInfo, CmId, EventChannel, RawEvent};

/// A listening endpoint: a CM id bound to an address, listening, on its own event channel.
pub struct VerbsListener {
    id: NonNull<ffi::rdma_cm_id>,
    evch: NonNull<ffi::rdma_event_channel>,
    pd: Arc<VerbsPd>,
    torn: AtomicBool,
}

// SAFETY: [V3] the id and channel are used only through thread-safe librdmacm calls.
unsafe impl Send for VerbsListener {}
// SAFETY: [V3] as above.
unsafe impl Sync for VerbsListener {}

impl std::fmt::Debug for VerbsListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsListener").finish_non_exhaustive()
    }
}

pub(crate) fn listen(pd: &Arc<VerbsPd>, addr: &str, port: &str) -> Result<VerbsListener> {
    let evch = EventChannel::new()?;
    let id = CmId::new(evch.0.as_ptr())?;
    let ai = AddrInfo::new(addr, Some(port), true)?;
    // SAFETY: [V1, V2] a live id and the address `rdma_getaddrinfo` returned.
    if call!("rdma_bind_addr", -1, unsafe { ffi::rdma_bind_addr(id.0.as_ptr(), ai.src()) }) != 0 {
        return Err(Error::provider("rdma_bind_addr", errno()));
    }
    check_device(pd, id.verbs(), "rdma_bind_addr")?;
    // SAFETY: [V1] a live, bound id.
    if call!("rdma_listen", -1, unsafe { ffi::rdma_listen(id.0.as_ptr(), 0) }) != 0 {
        return Err(Error::provider("rdma_listen", errno()));
    }
    Ok(VerbsListener { id: id.into_raw(), evch: evch.into_raw(), pd: Arc::clone(pd), torn: AtomicBool::new(false) })
}

impl VerbsListener {
    fn teardown(&self) -> Result<()> {
        if self.torn.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // SAFETY: [V1] a live id whose events were all acked; destroyed once.
        let r = release!(CmId: "rdma_destroy_id", -1, unsafe { ffi::rdma_destroy_id(self.id.as_ptr()) });
        let r = if r == 0 { Ok(()) } else { Err(Error::provider("rdma_destroy_id", errno())) };
        // SAFETY: [V1] its only id is gone; destroyed once.
        unsafe { ffi::rdma_destroy_event_channel(self.evch.as_ptr()) };
        track!(EventChannel, -1);
        r
    }
}

impl Drop for VerbsListener {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            rpma_core::rpma_log!(Error, "dropping an endpoint: {e}");
        }
    }
}

impl ListenerBackend<Verbs> for VerbsListener {
    fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: [V1] open until teardown, which needs `self` by value or drop.
        unsafe { BorrowedFd::borrow_raw((*self.evch.as_ptr()).fd) }
    }

    fn next_request(&self, cfg: &QueueConfig<'_, Verbs>) -> Result<VerbsQp> {
        let ev = RawEvent::get(self.evch)?;
        if ev.kind() != ffi::rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST {
            let k = ev.kind();
            ev.ack()?;
            return Err(Error::invalid_input("rdma_get_cm_event", &format!("unexpected CM event {k}")));
        }
        let Some(id) = NonNull::new(ev.id()) else {
            ev.ack()?;
            return Err(Error::provider("rdma_get_cm_event", libc::EIO));
        };
        // librdmacm created this id for the request.
        track!(CmId, 1);
        let pdata = ev.private_data();
        // SAFETY: [V2] the id of an event not yet acked.
        let ctx = unsafe { (*id.as_ptr()).verbs };
        let built = check_device(&self.pd, ctx, "rdma_create_qp")
            .and_then(|()| EventChannel::new())
            .and_then(|ch| build_qp(&self.pd, id, ch, cfg, true, pdata));
        match built {
            Ok(qp) => {
                ev.ack()?;
                // SAFETY: [V1] a live id (its event acked) and the QP's live channel.
                if call!("rdma_migrate_id", -1, unsafe { ffi::rdma_migrate_id(id.as_ptr(), qp.evch.as_ptr()) }) != 0 {
                    let e = Error::provider("rdma_migrate_id", errno());
                    let _ = qp.reject();
                    return Err(e);
                }
                Ok(qp)
            }
            Err(e) => {
                // SAFETY: [V1] the request's id, rejected, then destroyed after its event is acked.
                let _ = call!("rdma_reject", -1, unsafe { ffi::rdma_reject(id.as_ptr(), std::ptr::null(), 0) });
                let a = ev.ack();
                // SAFETY: [V1] as above; every event of this id is acked now.
                let d = release!(CmId: "rdma_destroy_id", -1, unsafe { ffi::rdma_destroy_id(id.as_ptr()) });
                if d != 0 {
                    rpma_core::rpma_log!(Error, "rdma_destroy_id of a failed request: errno {}", errno());
                }
                a?;
                Err(e)
            }
        }
    }

    fn shutdown(self) -> Result<()> {
        self.teardown()
    }
}
