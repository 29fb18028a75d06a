//! Observability (the `tracing` feature): a span per connection, events for its connection
//! management and its failed completions, and the counters of [`Conn::stats`](crate::Conn::stats).
//!
//! With the feature, every connection has a span `rpma.conn` (target `rpma`, level `INFO`) with
//! the fields `backend`, `device`, `side` (`active`/`passive`), `local` and `remote` (the
//! connection's two addresses as the backend reports them once the request is made or taken,
//! `addr:port`; where it does not, the address this side was given: the endpoint's for a
//! passive connection, the one connected to for an active one) and `qp_num`. The span is entered around the
//! connection's setup and teardown calls (requesting, connecting or accepting, rejecting, taking
//! a CM event, disconnecting, deleting; a passive connection's span begins once its request is
//! taken) and is the parent of the connection's events (each named, and with the message a
//! formatting subscriber prints):
//! - `rpma.cm_event`, "connection event" (`INFO`; `WARN` for lost, rejected, unreachable and
//!   unexpected events): field `event` (the [`ConnEvent`]'s text, or `unexpected` with `raw`);
//! - `rpma.conn_step`, "connection step" (`DEBUG`): field `step` (`requested`, `received`,
//!   `connect`, `accept`, `reject`, `disconnect`, `delete`);
//! - `rpma.failed_completion`, "completion failed" (`WARN`): fields `status`, `status_raw`,
//!   `wr_id`, `qp_num`, `vendor_err`, for every completion polled whose status is not success
//!   (also from a shared receive queue's CQ, whose events have no connection span as parent).
//!   Not the opcode: an error completion leaves it undefined and a provider may not write it
//!   (rule V7 of docs/memory.md: through the C ABI the array may be uninitialised).
//!
//! A `WARN` event of a connection also names it in its field `conn` (device, queue pair, local
//! and remote address: `mock0 qp 3: ? -> 127.0.0.1:7204`), since a filter at `WARN`
//! (`RUST_LOG=rpma=warn`) drops the `INFO` span.
//!
//! Of each polled completion only what the provider always writes is read: the status, and of a
//! failed one `wr_id`, `qp_num` and `vendor_err`. The backend's CQ reports them from inside its
//! poll ([`crate::cq_trace`]).
//!
//! Nothing is emitted for a successful operation. Without the feature the types here are
//! zero-sized and their methods empty, so the data path is compiled exactly as before.

use crate::peer::Peer;
use crate::transport::Transport;
use crate::types::ConnEvent;

#[cfg(feature = "tracing")]
pub use on::ConnStats;
#[cfg(feature = "tracing")]
pub(crate) use on::{ConnTrace, EpTrace};

#[cfg(not(feature = "tracing"))]
pub(crate) use off::{ConnTrace, EpTrace};

/// The steps of a connection's life reported as `rpma.conn_step` events.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Step {
    /// An outgoing connection request was made.
    Requested,
    /// An incoming connection request was taken from an endpoint.
    Received,
    /// An outgoing request was connected.
    Connect,
    /// An incoming request was accepted.
    Accept,
    /// A request was rejected or abandoned.
    Reject,
    /// A disconnect was requested.
    Disconnect,
    /// The connection was deleted.
    Delete,
}

impl Step {
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    const fn as_str(self) -> &'static str {
        match self {
            Self::Requested => "requested",
            Self::Received => "received",
            Self::Connect => "connect",
            Self::Accept => "accept",
            Self::Reject => "reject",
            Self::Disconnect => "disconnect",
            Self::Delete => "delete",
        }
    }
}

#[cfg(feature = "tracing")]
mod on {
    use std::sync::{Arc, OnceLock};

    use tracing::field::Empty;
    use tracing::Span;

    use super::{ConnEvent, Peer, Step, Transport};
    use crate::transport::{CmBackend, CqBackend, QpBackend};

    /// What a connection's completions counted (the `tracing` feature;
    /// [`Conn::stats`](crate::Conn::stats)).
    ///
    /// Counted from the completions polled through the connection's own CQs
    /// ([`Conn::cq`](crate::Conn::cq), [`Conn::rcq`](crate::Conn::rcq), and the CQ
    /// [`Conn::wait`](crate::Conn::wait) returns), when they are polled; a shared receive
    /// queue's own CQ belongs to no connection and counts for none. Only failed completions are
    /// counted: they take the cold path anyway, where a count of every completion (or of the
    /// bytes) would cost each poll an add, measured at 6 % of a verbs poll
    /// (docs/observability.md). The count only grows.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    #[non_exhaustive]
    pub struct ConnStats {
        /// Completions polled whose status is not success (each also emitted as a
        /// `rpma.failed_completion` event).
        pub errors: u64,
    }

    /// A connection's span, and who the connection is for its `WARN` events (`conn`): a
    /// filter at `WARN` (`RUST_LOG=rpma=warn`) drops the `INFO` span, and an event must still
    /// say which connection it is about.
    pub(crate) struct ConnTrace {
        span: Span,
        /// Boxed: a `Conn` grows by a pointer only.
        id: Box<Identity>,
    }

    /// What makes a connection's `conn` field.
    #[derive(Default)]
    struct Identity {
        device: Box<str>,
        /// The addresses the application gave (`""` for none): the endpoint's on a passive
        /// connection, the one connected to on an active one.
        given: (Box<str>, Box<str>),
        /// Set once the queue pair is attached (before that there is no connection to name).
        conn: OnceLock<Arc<str>>,
    }

    /// The `conn` field: the device, the queue pair and the connection's two addresses, this
    /// side's first, `?` for one not known (`rxe0 qp 17: 10.77.0.2:41234 -> 10.77.0.1:7204`,
    /// `mock0 qp 3: ? -> 127.0.0.1:7204`).
    fn who(device: &str, qp_num: u32, local: &str, remote: &str) -> Arc<str> {
        let or_unknown = |a: &str| if a.is_empty() { "?".to_owned() } else { a.to_owned() };
        format!("{device} qp {qp_num}: {} -> {}", or_unknown(local), or_unknown(remote)).into()
    }

    /// An endpoint's address, given to the spans of the connections it accepts.
    pub(crate) struct EpTrace {
        local: Box<str>,
    }

    impl EpTrace {
        pub(crate) fn new(addr: &str, port: &str) -> Self {
            Self { local: format!("{addr}:{port}").into_boxed_str() }
        }
    }

    fn span(backend: &str, device: &str, side: &str, local: &str, remote: &str) -> Span {
        tracing::info_span!(
            target: "rpma",
            "rpma.conn",
            backend,
            device,
            side,
            local = (!local.is_empty()).then_some(local),
            remote = (!remote.is_empty()).then_some(remote),
            qp_num = Empty,
        )
    }

    impl ConnTrace {
        fn with(backend: &str, device: &str, side: &str, local: &str, remote: &str) -> Self {
            Self {
                span: span(backend, device, side, local, remote),
                id: Box::new(Identity {
                    device: device.into(),
                    given: (local.into(), remote.into()),
                    conn: OnceLock::new(),
                }),
            }
        }

        /// The trace of an outgoing connection of `peer` to `addr:port`.
        pub(crate) fn active<T: Transport>(peer: &Peer<T>, addr: &str, port: &str) -> Self {
            let device = peer.inner.device.name();
            Self::with(peer.transport().name(), &device, "active", "", &format!("{addr}:{port}"))
        }

        /// The trace of a connection of `peer` accepted by the endpoint `ep`.
        pub(crate) fn passive<T: Transport>(peer: &Peer<T>, ep: &EpTrace) -> Self {
            let device = peer.inner.device.name();
            Self::with(peer.transport().name(), &device, "passive", &ep.local, "")
        }

        /// Records the connection's queue pair in its span and in `conn` (its number, and the
        /// addresses the backend knows of it) and makes the span the parent of its CQs' events.
        pub(crate) fn attach<T: Transport>(&self, qp: &T::Qp) {
            let qp_num = qp.qp_num();
            self.span.record("qp_num", qp_num);
            let (local, remote) = qp.addrs();
            if let Some(a) = local {
                self.span.record("local", tracing::field::display(a));
            }
            if let Some(a) = remote {
                self.span.record("remote", tracing::field::display(a));
            }
            // The addresses as the span now holds them: the backend's, else the ones given.
            let local = local.map_or_else(|| self.id.given.0.to_string(), |a| a.to_string());
            let remote = remote.map_or_else(|| self.id.given.1.to_string(), |a| a.to_string());
            let conn = self.id.conn.get_or_init(|| who(&self.id.device, qp_num, &local, &remote));
            qp.cq().trace().attach(&self.span, conn);
            if let Some(rcq) = qp.rcq() {
                rcq.trace().attach(&self.span, conn);
            }
        }

        /// Enters the connection's span until the guard is dropped.
        pub(crate) fn enter(&self) -> tracing::span::Entered<'_> {
            self.span.enter()
        }

        /// A step of the connection's life.
        pub(crate) fn step(&self, step: Step) {
            tracing::debug!(name: "rpma.conn_step", target: "rpma", parent: &self.span, step = step.as_str(), "connection step");
        }

        /// A CM event taken from the connection's channel.
        pub(crate) fn cm_event(&self, event: ConnEvent) {
            let e = event.as_str();
            match event {
                ConnEvent::Established | ConnEvent::Closed | ConnEvent::Undefined => {
                    tracing::info!(name: "rpma.cm_event", target: "rpma", parent: &self.span, event = e, "connection event");
                }
                ConnEvent::Lost | ConnEvent::Rejected | ConnEvent::Unreachable => {
                    let conn = self.id.conn.get().map(|c| &**c);
                    tracing::warn!(name: "rpma.cm_event", target: "rpma", parent: &self.span, conn, event = e, "connection event");
                }
            }
        }

        /// A CM event the connection does not expect (it is acknowledged and reported as
        /// `Other`).
        pub(crate) fn unexpected_event(&self, raw: u32) {
            let conn = self.id.conn.get().map(|c| &**c);
            tracing::warn!(name: "rpma.cm_event", target: "rpma", parent: &self.span, conn, event = "unexpected", raw, "connection event");
        }

        /// This trace, leaving a disabled span behind (a request handing its trace to its
        /// connection).
        pub(crate) fn take(&mut self) -> Self {
            let none = Self { span: Span::none(), id: Box::default() };
            std::mem::replace(self, none)
        }

        /// What the CQs of the connection's queue pair `qp` counted.
        pub(crate) fn stats<T: Transport>(qp: &T::Qp) -> ConnStats {
            let errors = qp.cq().trace().errors() + qp.rcq().map_or(0, |r| r.trace().errors());
            ConnStats { errors }
        }
    }
}

#[cfg(not(feature = "tracing"))]
mod off {
    use super::{ConnEvent, Peer, Step, Transport};

    /// Nothing without the `tracing` feature.
    pub(crate) struct ConnTrace;

    /// Nothing without the `tracing` feature.
    pub(crate) struct EpTrace;

    /// What entering a span returns without the `tracing` feature.
    pub(crate) struct Entered;

    impl EpTrace {
        #[inline(always)]
        pub(crate) const fn new(_addr: &str, _port: &str) -> Self {
            Self
        }
    }

    impl ConnTrace {
        #[inline(always)]
        pub(crate) const fn active<T: Transport>(_peer: &Peer<T>, _addr: &str, _port: &str) -> Self {
            Self
        }

        #[inline(always)]
        pub(crate) const fn passive<T: Transport>(_peer: &Peer<T>, _ep: &EpTrace) -> Self {
            Self
        }

        #[inline(always)]
        pub(crate) const fn attach<T: Transport>(&self, _qp: &T::Qp) {}

        #[inline(always)]
        pub(crate) const fn enter(&self) -> Entered {
            Entered
        }

        #[inline(always)]
        pub(crate) const fn step(&self, _step: Step) {}

        #[inline(always)]
        pub(crate) const fn cm_event(&self, _event: ConnEvent) {}

        #[inline(always)]
        pub(crate) const fn unexpected_event(&self, _raw: u32) {}

        #[inline(always)]
        pub(crate) fn take(&mut self) -> Self {
            Self
        }
    }
}
