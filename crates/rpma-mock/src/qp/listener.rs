//! A listening endpoint of the mock and the connection requests waiting at it.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use rpma_core::transport::{CmEvent, ListenerBackend, QueueConfig};
use rpma_core::{Error, ErrorKind, Result};

use crate::counters::{Kind, Live};
use crate::fabric::MockFabric;
use crate::notify::Notifier;
use crate::pd::MockPd;
use crate::power::PowerLoss;

use super::wire::frame::Frame;
use super::wire::rendezvous::{publish, ConnectRequests, Published};
use super::wire::Link;
use super::{create_qp, MockQp, QpShared, EINVAL, ERROR};

/// The side that asked to connect: a queue pair of this process, or one in another process
/// (its connection, not accepted yet).
pub(crate) enum Requester {
    Local(Weak<QpShared>),
    Wire(Arc<Link>),
}

impl Requester {
    /// Refuses the request: the requesting side sees REJECTED.
    pub(super) fn reject(&self) {
        match self {
            Self::Local(w) => {
                if let Some(c) = w.upgrade() {
                    c.state.store(ERROR, Ordering::Release);
                    c.push_event(CmEvent::Rejected, None);
                }
            }
            Self::Wire(l) => {
                l.send(&Frame::Reject);
                l.close(true);
            }
        }
    }
}

/// A connection request waiting at a listener.
pub(crate) struct Incoming {
    pub(crate) client: Requester,
    pub(crate) pdata: Box<[u8]>,
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
    /// Its node's power was cut: it takes no request any more and frees its address.
    pub(crate) dead: AtomicBool,
}

impl ListenerShared {
    /// Delivers `ev`, a CM event other than a connection request
    /// ([`MockFabric::inject_listener_event`](crate::MockFabric::inject_listener_event)).
    pub(crate) fn inject(&self, ev: CmEvent) {
        self.requests.push(ListenEvent::Other(ev));
    }
}

impl PowerLoss for ListenerShared {
    /// Its node's power was cut: it takes no request any more and its address is free.
    fn power_lost(&self) {
        self.dead.store(true, Ordering::Release);
    }
}

impl ConnectRequests for ListenerShared {
    /// A request from another process, over the rendezvous directory.
    fn push_request(&self, link: Arc<Link>, pdata: Box<[u8]>) {
        self.requests.push(ListenEvent::Request(Incoming { client: Requester::Wire(link), pdata }));
    }
}

/// A listening endpoint of the mock.
pub struct MockListener {
    shared: Arc<ListenerShared>,
    pd: Arc<MockPd>,
    addr: String,
    port: u16,
    torn: AtomicBool,
    /// Its socket in the rendezvous directory (cross-process mode).
    published: Option<Published>,
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
    let shared = Arc::new(ListenerShared {
        requests: f.notifier(f.live(Kind::Channel), "rdma_create_event_channel")?,
        dead: AtomicBool::new(false),
    });
    f.listeners.add(addr, port, &shared)?;
    if let Some(p) = &f.power {
        p.add_listener(pd.dev.index, Arc::downgrade(&shared) as Weak<dyn PowerLoss>);
    }
    let published = match &f.rendezvous {
        Some(dir) => match publish(
            dir,
            addr,
            port,
            pd.caps.max_private_data_connect,
            Arc::downgrade(&shared) as Weak<dyn ConnectRequests>,
        ) {
            Ok(p) => Some(p),
            Err(e) => {
                f.listeners.remove(addr, port, &shared);
                return Err(e);
            }
        },
        None => None,
    };
    Ok(MockListener {
        shared,
        pd: Arc::clone(pd),
        addr: addr.to_owned(),
        port,
        torn: AtomicBool::new(false),
        published,
        _live: f.live(Kind::Listener),
    })
}

impl MockListener {
    fn teardown(&mut self) -> Result<()> {
        if self.torn.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.pd.fabric.listeners.remove(&self.addr, self.port, &self.shared);
        // No request comes from other processes any more (the socket is removed).
        drop(self.published.take());
        for ev in self.shared.requests.drain() {
            let ListenEvent::Request(inc) = ev else { continue };
            inc.client.reject();
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
        self.next_request_until(cfg, None)
    }

    fn next_request_timeout(&self, cfg: &QueueConfig<'_, MockFabric>, timeout: Duration) -> Option<Result<MockQp>> {
        Some(self.next_request_until(cfg, self.pd.fabric.now().checked_add(timeout)))
    }

    fn shutdown(mut self) -> Result<()> {
        self.teardown()
    }
}

impl MockListener {
    /// [`ListenerBackend::next_request`], waiting until `deadline` at most (without making the
    /// channel's fd).
    fn next_request_until(&self, cfg: &QueueConfig<'_, MockFabric>, deadline: Option<Instant>) -> Result<MockQp> {
        self.pd.fabric.faults.check("rdma_get_cm_event")?;
        let inc = match self.shared.requests.pop_until(None, deadline) {
            Ok(Some(ListenEvent::Request(i))) => i,
            Ok(Some(ListenEvent::Other(ev))) => {
                // As librpma: the event is acked, then rejected as not a connection request.
                self.pd.fabric.faults.check("rdma_ack_cm_event")?;
                return Err(Error::invalid_input("rdma_get_cm_event", &format!("not a connection request: {ev:?}")));
            }
            Ok(None) => return Err(Error::new(ErrorKind::NoEvent, "rdma_get_cm_event")),
            Err(e) => return Err(Error::provider("rdma_get_cm_event", e.raw_os_error().unwrap_or(EINVAL))),
        };
        match create_qp(&self.pd, cfg).and_then(|q| self.pd.fabric.faults.check("rdma_ack_cm_event").map(|()| q)) {
            Ok(mut qp) => {
                qp.req_pdata = inc.pdata;
                qp.incoming = Some(inc.client);
                Ok(qp)
            }
            Err(e) => {
                inc.client.reject();
                Err(e)
            }
        }
    }
}
