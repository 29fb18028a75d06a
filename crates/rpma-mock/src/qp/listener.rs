//! A listening endpoint of the mock and the connection requests waiting at it.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use rpma_core::transport::{CmEvent, ListenerBackend, QueueConfig};
use rpma_core::{Error, ErrorKind, Result};

use crate::counters::{Kind, Live};
use crate::notify::{new_notifier, Notifier};
use crate::{MockFabric, MockPd};

use super::{create_qp, MockQp, QpShared, EINVAL, ERROR};

/// A connection request waiting at a listener.
pub(crate) struct Incoming {
    pub(super) client: Weak<QpShared>,
    pub(super) pdata: Box<[u8]>,
}

/// A CM event on a listening endpoint's channel.
pub(crate) enum ListenEvent {
    /// `RDMA_CM_EVENT_CONNECT_REQUEST`.
    Request(Incoming),
    /// Any other event (injected: [`MockFabric::inject_listener_event`](crate::MockFabric::inject_listener_event)).
    Other(CmEvent),
}

pub(crate) struct ListenerShared {
    pub(crate) requests: Notifier<ListenEvent>,
}

/// A listening endpoint of the mock.
pub struct MockListener {
    shared: Arc<ListenerShared>,
    pd: Arc<MockPd>,
    addr: String,
    port: u16,
    torn: AtomicBool,
    _live: Live,
}

impl std::fmt::Debug for MockListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockListener").field("addr", &self.addr).field("port", &self.port).finish()
    }
}

pub(crate) fn listen(pd: &Arc<MockPd>, addr: &str, port: &str) -> Result<MockListener> {
    let f = &pd.fabric;
    f.faults.check("rdma_create_event_channel")?;
    f.faults.check("rdma_create_id")?;
    f.faults.check("rdma_getaddrinfo")?;
    let (dev, port) = f.resolve(addr, port)?;
    if dev.name() != pd.dev.name() {
        return Err(Error::provider("rdma_bind_addr", 99).with_detail("the address belongs to another device"));
    }
    f.faults.check("rdma_bind_addr")?;
    f.faults.check("rdma_listen")?;
    let shared =
        Arc::new(ListenerShared { requests: new_notifier(f, f.live(Kind::Channel), "rdma_create_event_channel")? });
    f.add_listener(addr, port, &shared)?;
    Ok(MockListener {
        shared,
        pd: Arc::clone(pd),
        addr: addr.to_owned(),
        port,
        torn: AtomicBool::new(false),
        _live: f.live(Kind::Listener),
    })
}

impl MockListener {
    fn teardown(&self) -> Result<()> {
        if self.torn.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.pd.fabric.remove_listener(&self.addr, self.port);
        for ev in self.shared.requests.drain() {
            let ListenEvent::Request(inc) = ev else { continue };
            if let Some(c) = inc.client.upgrade() {
                c.state.store(ERROR, Ordering::Release);
                c.push_event(CmEvent::Rejected, None);
            }
        }
        self.pd.fabric.faults.check("rdma_destroy_id")
    }
}

impl Drop for MockListener {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

impl ListenerBackend<MockFabric> for MockListener {
    fn fd(&self) -> BorrowedFd<'_> {
        self.shared.requests.fd()
    }

    fn next_request(&self, cfg: &QueueConfig<'_, MockFabric>) -> Result<MockQp> {
        self.pd.fabric.faults.check("rdma_get_cm_event")?;
        let inc = match self.shared.requests.pop() {
            Ok(Some(ListenEvent::Request(i))) => i,
            Ok(Some(ListenEvent::Other(ev))) => {
                // As librpma: the event is acked, then rejected as not a connection request.
                self.pd.fabric.faults.check("rdma_ack_cm_event")?;
                return Err(Error::inval("rdma_get_cm_event", &format!("not a connection request: {ev:?}")));
            }
            Ok(None) => return Err(Error::new(ErrorKind::NoEvent, "rdma_get_cm_event")),
            Err(e) => return Err(Error::provider("rdma_get_cm_event", e.raw_os_error().unwrap_or(EINVAL))),
        };
        let reject = |inc: &Incoming| {
            if let Some(c) = inc.client.upgrade() {
                c.state.store(ERROR, Ordering::Release);
                c.push_event(CmEvent::Rejected, None);
            }
        };
        match create_qp(&self.pd, cfg).and_then(|q| self.pd.fabric.faults.check("rdma_ack_cm_event").map(|()| q)) {
            Ok(mut qp) => {
                qp.req_pdata = inc.pdata;
                qp.incoming = Some(inc.client);
                Ok(qp)
            }
            Err(e) => {
                reject(&inc);
                Err(e)
            }
        }
    }

    fn shutdown(self) -> Result<()> {
        self.teardown()
    }
}
