//! The connection management of a queue pair: librpma's calls of `rpma_conn_new`, connecting,
//! accepting and rejecting, the connection's CM events, disconnecting (the DREQ and its timer), and
//! the teardown in librpma's order.

use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use rpma_core::transport::{CmBackend, CmEvent, QueueConfig};
use rpma_core::{Error, ErrorKind, Result};

use super::listener::{Incoming, ListenEvent, Requester};
use super::wire::frame::Frame;
use super::wire::link::{native_of, padded, start_error};
use super::wire::{rendezvous, Link};
use super::{create_qp, pad, MockQp, QpShared, CONNECTED, CONNECTING, ECONNREFUSED, EINVAL, ERROR, INIT};
use crate::engine::Progress;
use crate::fabric::{FabricInner, MockFabric};
use crate::pd::MockPd;
use crate::sim::Sched;

/// The CM timer of `qp` fired: a disconnect it started was not answered within the CM timeout,
/// so it closes (RDMA CM reports DISCONNECTED when the DREQ times out).
pub(super) fn cm_timer_fired(qp: &QpShared) {
    if qp.disconnecting.load(Ordering::Acquire) {
        qp.hang_up(CmEvent::Disconnected);
    }
}

/// The provider calls of librpma's `rpma_conn_new` (docs/semantics.md#connecting-a-request): the
/// connection's own CM event channel, moving the CM id to it, and, without native flush, the APM
/// flush buffer (an `mmap`ed page with an 8-byte region registered in it). The mock's APM flush
/// needs no buffer, so only the calls are modelled (each a fault point). Returns whether a flush
/// buffer exists.
fn conn_new(f: &FabricInner, native_flush: bool) -> Result<bool> {
    f.faults.check("rdma_create_event_channel")?;
    f.faults.check("rdma_migrate_id")?;
    if native_flush {
        return Ok(false);
    }
    f.faults
        .check("mmap")
        .map_err(|e| Error::new(ErrorKind::OutOfMemory, e.op()).with_detail("cannot map the APM flush buffer"))?;
    if let Err(e) = f.faults.check("ibv_reg_mr") {
        // As librpma: the page is unmapped, a failure of that is ignored.
        let _ = f.faults.check("munmap");
        return Err(e);
    }
    Ok(true)
}

pub(crate) fn connect_request(
    pd: &Arc<MockPd>,
    addr: &str,
    port: &str,
    cfg: &QueueConfig<'_, MockFabric>,
) -> Result<MockQp> {
    let f = &pd.fabric;
    f.faults.check("rdma_getaddrinfo")?;
    f.faults.check("rdma_create_id")?;
    let (_dev, port) = f.resolve(addr, port)?;
    f.faults.check("rdma_resolve_addr")?;
    f.faults.check("rdma_resolve_route")?;
    let mut qp = create_qp(pd, cfg)?;
    qp.target = Some((addr.to_owned(), port));
    Ok(qp)
}

impl MockQp {
    /// [`CmBackend::next_event`], waiting until `deadline` at most (without making the event
    /// channel's fd).
    fn next_event_until(&self, deadline: Option<Instant>) -> Result<(CmEvent, Option<Box<[u8]>>)> {
        self.shared.fabric.faults.check("rdma_get_cm_event")?;
        let hook = self.progress_hook();
        match self.shared.events.pop_until(hook.as_ref().map(|h| h as &dyn Fn()), deadline) {
            // A failed ack loses the event (as librpma: the private-data copy is discarded).
            Ok(Some(e)) => self.shared.fabric.faults.check("rdma_ack_cm_event").map(|()| e),
            Ok(None) => Err(Error::new(ErrorKind::NoEvent, "rdma_get_cm_event")),
            Err(e) => Err(Error::provider("rdma_get_cm_event", e.raw_os_error().unwrap_or(EINVAL))),
        }
    }

    fn teardown(&self) -> Result<()> {
        if self.torn.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let s = &self.shared;
        let f = &s.fabric.faults;
        let mut first: Result<()> = Ok(());
        let mut note = |r: Result<()>| {
            if first.is_ok() {
                first = r;
            }
        };
        // The peer sees the connection close, as when a process destroys a connected id; a
        // peer waiting for this side to answer its disconnect gets its CLOSED now.
        if let Some(r) = s.remote() {
            if !s.closed.swap(true, Ordering::AcqRel) || r.disconnecting.load(Ordering::Acquire) {
                r.hang_up(CmEvent::Disconnected);
            }
        }
        match &self.incoming {
            Some(Requester::Local(w)) => {
                if let Some(c) = w.upgrade() {
                    if s.state() == INIT && c.state() == CONNECTING {
                        c.state.store(ERROR, Ordering::Release);
                        c.push_event(CmEvent::Rejected, None);
                    }
                }
            }
            // A request never accepted is rejected (its link is this handle's only).
            Some(r @ Requester::Wire(_)) if s.link.get().is_none() => r.reject(),
            _ => {}
        }
        s.to_error();
        // The peer process sees the connection close; what is outstanding is flushed.
        if let Some(l) = s.link.get() {
            l.close(true);
            l.flush(s);
        }
        if let Some(d) = &s.deferred {
            d.clear();
        }
        // The progress thread never holds it from now on: its last handle is its owner's.
        s.fabric.engine.forget(s);
        // librpma's order (rpma_conn_delete, docs/semantics.md#connection-teardown): the APM flush
        // buffer first.
        if self.flush_buf {
            note(f.check("ibv_dereg_mr"));
            note(f.check("munmap").map_err(|e| {
                Error::new(ErrorKind::InvalidInput, e.op()).with_detail("cannot unmap the APM flush buffer")
            }));
        }
        note(f.check("rdma_destroy_qp"));
        if self.rcq.is_some() {
            note(f.check("ibv_destroy_cq"));
        }
        note(f.check("ibv_destroy_cq"));
        note(f.check("rdma_destroy_id"));
        if self.shared_channel.is_some() {
            note(f.check("ibv_destroy_comp_channel"));
        }
        note(f.check("rdma_destroy_event_channel"));
        // Release whatever the queues still hold (buffers keep regions alive).
        let _ = s.events.drain();
        first
    }
}

impl Drop for MockQp {
    fn drop(&mut self) {
        // After `destroy` this does nothing (the queue pair is released once).
        if let Err(e) = self.teardown() {
            rpma_core::rpma_log!(Error, "dropping a connection failed: {e}");
        }
    }
}

impl CmBackend<MockFabric> for MockQp {
    fn request_private_data(&self) -> &[u8] {
        &self.req_pdata
    }

    fn connect(&mut self, pdata: Option<&[u8]>) -> Result<()> {
        if self.shared.fabric.sim.is_some() {
            Sched::point(if self.incoming.is_some() { "accept" } else { "connect" });
        }
        let s = &self.shared;
        // A node whose power was cut (since its queue pair was made) connects nothing.
        s.pd.alive(if self.incoming.is_some() { "rdma_accept" } else { "rdma_connect" })?;
        let caps = &s.pd.caps;
        // RDMA CM carries at most 56 (connect) / 196 (accept over RoCE) bytes: longer private
        // data is refused (EINVAL), as by the kernel, and never reaches the peer.
        let (op, limit) = if self.incoming.is_some() {
            ("rdma_accept", caps.max_private_data_accept)
        } else {
            ("rdma_connect", caps.max_private_data_connect)
        };
        if pdata.is_some_and(|p| p.len() > limit) {
            return Err(Error::provider(op, EINVAL).with_detail("private data longer than RDMA CM carries"));
        }
        if let Some(Requester::Wire(link)) = &self.incoming {
            s.fabric.faults.check("rdma_accept")?;
            if link.is_gone() {
                return Err(Error::provider("rdma_accept", ECONNREFUSED).with_detail("the requesting process is gone"));
            }
            self.flush_buf = conn_new(&s.fabric, caps.native_flush)?;
            link.attach(s);
            let _ = s.link.set(Arc::clone(link));
            s.fast_slots.store(0, Ordering::Release);
            s.state.store(CONNECTED, Ordering::Release);
            s.established.store(true, Ordering::Release);
            s.push_event(CmEvent::Established, None);
            link.send(&Frame::Accept { native: native_of(caps), pdata: padded(pdata, caps.max_private_data_accept) });
            return Ok(());
        }
        if let Some(Requester::Local(client)) = &self.incoming {
            s.fabric.faults.check("rdma_accept")?;
            let c = client.upgrade().filter(|c| c.state() == CONNECTING).ok_or_else(|| {
                Error::provider("rdma_accept", ECONNREFUSED).with_detail("the requesting side is gone")
            })?;
            // librpma creates the connection object after the accept; if that fails, the
            // request is released (the client is rejected).
            self.flush_buf = conn_new(&s.fabric, caps.native_flush)?;
            let _ = s.remote.set(Arc::downgrade(&c));
            let _ = c.remote.set(Arc::downgrade(s));
            let _ = s.remote_mrs.set(Arc::clone(&c.pd.mrs));
            let _ = c.remote_mrs.set(Arc::clone(&s.pd.mrs));
            s.state.store(CONNECTED, Ordering::Release);
            c.state.store(CONNECTED, Ordering::Release);
            s.established.store(true, Ordering::Release);
            c.established.store(true, Ordering::Release);
            // The accepting side's event first: once the client sees ESTABLISHED it may
            // disconnect at once, and the server must still see ESTABLISHED before CLOSED.
            s.push_event(CmEvent::Established, None);
            // A partition that drops this side's packets to the requester: the accept never
            // reaches it (it gives up after its timeout; this side sees it go).
            if !s.fabric.net.dropped(s.node(), c.node()) {
                c.push_event(CmEvent::Established, pad(pdata, caps.max_private_data_accept));
            }
            return Ok(());
        }
        self.flush_buf = conn_new(&s.fabric, caps.native_flush)?;
        s.fabric.faults.check("rdma_connect")?;
        if s.state() != INIT {
            return Err(Error::provider("rdma_connect", EINVAL));
        }
        s.state.store(CONNECTING, Ordering::Release);
        let (addr, port) = self.target.as_ref().expect("an outgoing request has a target");
        if let Some(l) = s.fabric.listeners.get(addr, *port).filter(|_| !s.fabric.always_wire) {
            // A partition that drops the requester's packets to the listener's node: the
            // request never arrives (the requester gives up after its timeout).
            if s.fabric.owner(addr).is_some_and(|dev| s.fabric.net.dropped(s.node(), dev.index)) {
                return Ok(());
            }
            l.requests.push(ListenEvent::Request(Incoming {
                client: Requester::Local(Arc::downgrade(s)),
                pdata: pad(pdata, caps.max_private_data_connect).unwrap_or_default(),
            }));
            return Ok(());
        }
        // Nobody listens in this process: another process may, through the rendezvous directory.
        let stream = match &s.fabric.rendezvous {
            Some(dir) => rendezvous::dial(dir, addr, *port)?,
            None => None,
        };
        let Some(stream) = stream else {
            s.state.store(ERROR, Ordering::Release);
            s.push_event(CmEvent::Unreachable, None);
            return Ok(());
        };
        let hello = Frame::Hello { native: native_of(caps), pdata: padded(pdata, caps.max_private_data_connect) };
        let link = Link::start(stream, Some(Arc::downgrade(s)), 0, format!("{addr}:{port}"), Some(hello))
            .map_err(|e| start_error(&e, "rdma_connect"))?;
        let _ = s.link.set(link);
        s.fast_slots.store(0, Ordering::Release);
        Ok(())
    }

    fn reject(self) -> Result<()> {
        let r = if self.incoming.is_some() { self.shared.fabric.faults.check("rdma_reject") } else { Ok(()) };
        let t = self.teardown();
        r.and(t)
    }

    fn event_fd(&self) -> BorrowedFd<'_> {
        self.shared.events.fd()
    }

    fn next_event(&self) -> Result<(CmEvent, Option<Box<[u8]>>)> {
        self.next_event_until(None)
    }

    fn next_event_timeout(&self, timeout: Duration) -> Option<Result<(CmEvent, Option<Box<[u8]>>)>> {
        Some(self.next_event_until(self.shared.fabric.now().checked_add(timeout)))
    }

    fn disconnect(&self) -> Result<()> {
        if self.shared.fabric.sim.is_some() {
            Sched::point("disconnect");
        }
        let s = &self.shared;
        s.fabric.faults.check("rdma_disconnect")?;
        if let (Some(link), true) = (s.link.get(), s.established.load(Ordering::Acquire)) {
            if s.closed.load(Ordering::Acquire) || link.is_gone() {
                // Answers the peer's disconnect (or the peer is gone): closed already.
                s.hang_up(CmEvent::Disconnected);
                link.send(&Frame::Drep);
            } else {
                // A DREQ: the peer answers with its own disconnect, or the CM timer fires.
                s.fabric.engine.ensure_thread("rdma_disconnect")?;
                s.disconnecting.store(true, Ordering::Release);
                s.to_error();
                link.send(&Frame::Dreq);
                s.fabric
                    .engine
                    .timer(s.fabric.now() + s.fabric.execution.cm_timeout, Arc::downgrade(s) as Weak<dyn Progress>);
            }
            link.flush(s);
            return Ok(());
        }
        if s.established.load(Ordering::Acquire) {
            match s.remote() {
                // Answers a disconnect the peer started: both sides are closed now.
                Some(r) if r.disconnecting.load(Ordering::Acquire) => {
                    s.hang_up(CmEvent::Disconnected);
                    r.hang_up(CmEvent::Disconnected);
                }
                // Starts one: the QP leaves the connected state at once and the peer sees
                // CLOSED; this side's own CLOSED comes when the peer disconnects too (or goes
                // away), as RDMA CM reports it.
                Some(r) if !s.closed.load(Ordering::Acquire) => {
                    // The DREQ times out if the peer stays silent (`cm_timer_fired`).
                    s.fabric.engine.ensure_thread("rdma_disconnect")?;
                    s.disconnecting.store(true, Ordering::Release);
                    s.to_error();
                    // Across a silent link the DREQ is lost: the peer hears nothing.
                    if !s.fabric.net.dropped(s.node(), r.node()) {
                        r.hang_up(CmEvent::Disconnected);
                    }
                    s.fabric
                        .engine
                        .timer(s.fabric.now() + s.fabric.execution.cm_timeout, Arc::downgrade(s) as Weak<dyn Progress>);
                }
                // The peer is gone, or this side is already closed (lost link).
                _ => s.hang_up(CmEvent::Disconnected),
            }
            return Ok(());
        }
        match s.state() {
            CONNECTING => {
                s.state.store(ERROR, Ordering::Release);
                Ok(())
            }
            ERROR => Ok(()),
            _ => Err(Error::provider("rdma_disconnect", EINVAL).with_detail("not connected")),
        }
    }

    fn destroy(self) -> Result<()> {
        self.teardown()
    }
}
