//! Reconnects made by a thread of the log's own ([`LogOptions::reconnect_in_background`]).
//!
//! The writer owns its connections and its ring and is not `Sync`, so the thread never touches
//! them: it only *establishes* new connections to the replicas the writer reports down (the
//! reconnect handshake with the writer's epoch and id, with the backoff of `Log::maintain`), and
//! hands each one over through a channel. The writer takes what was handed over when it calls
//! `sync`, `truncate_prefix`, `maintain` or `reconnect` (an empty channel costs a `try_recv`: no
//! lock, no allocation) and catches the replica up itself. The thread is the one path that
//! connects a replica while it runs: `Log::reconnect` asks it to try at once and waits for its
//! handover.
//!
//! The thread comes from the transport's runtime and waits only in its `park` (woken through
//! the runtime's waker when the writer tells it something), so a simulated fabric schedules it
//! like any other actor.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Waker;
use std::time::Instant;

use super::connect::{self, Connected};
use super::options::{LogOptions, ReplicaAddr};
use crate::format::Ask;
use rpma::runtime::JoinHandle;
use rpma::{Conn, MrRemote, Peer, Transport};

/// What the writer tells the thread.
pub(super) enum Request {
    /// The replica is down: connect it again (now, or after its backoff).
    Down(usize),
    /// Connect the replica now, whatever its backoff (`Log::reconnect`).
    Now(usize),
    /// The replica rejoined (caught up): its backoff starts over.
    Rejoined(usize),
}

/// What the thread hands over.
pub(super) enum Handover<T: Transport> {
    /// A connection accepted by the replica (its region's descriptor, its ring's bytes).
    Connected { replica: usize, conn: Conn<T>, remote: MrRemote, cap: u64 },
    /// An attempt failed (the replica is tried again after its backoff).
    Failed { replica: usize, why: String },
}

/// What the thread wants of a replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Want {
    /// Nothing: it is connected (or was never reported down).
    Idle,
    /// To connect it at this time.
    At(Instant),
    /// Its connection was handed over: nothing until the writer says it rejoined or is down
    /// again (so no second connection ever kills the first's rkey).
    HandedOver,
}

/// The requests waiting for the thread, and how to wake it.
struct Mailbox {
    requests: Mutex<VecDeque<Request>>,
    /// The thread's waker (set by the thread before it first parks).
    waker: Mutex<Option<Waker>>,
    /// The writer's waker, while it waits for a handover parked ([`Wait::Sleep`](super::Wait::Sleep)):
    /// woken after each one.
    writer: Mutex<Option<Waker>>,
    stop: AtomicBool,
}

impl Mailbox {
    fn wake(&self) {
        if let Some(w) = self.waker.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
            w.wake_by_ref();
        }
    }

    fn wake_writer(&self) {
        if let Some(w) = self.writer.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
            w.wake_by_ref();
        }
    }
}

/// The writer's end of the thread.
pub(super) struct Reconnector<T: Transport> {
    mailbox: Arc<Mailbox>,
    handovers: Receiver<Handover<T>>,
    thread: Option<JoinHandle>,
}

impl<T: Transport> Reconnector<T> {
    /// Starts the thread for the replicas `addrs` of a writer of `epoch` and `writer_id`.
    pub(super) fn spawn(
        peer: &Peer<T>,
        addrs: Vec<ReplicaAddr>,
        opts: LogOptions,
        epoch: u64,
        writer_id: u64,
    ) -> std::io::Result<Self> {
        let (tx, handovers) = mpsc::channel();
        let mailbox = Arc::new(Mailbox {
            requests: Mutex::new(VecDeque::new()),
            waker: Mutex::new(None),
            writer: Mutex::new(None),
            stop: AtomicBool::new(false),
        });
        let m = Arc::clone(&mailbox);
        let writer = Writer { peer: peer.clone(), addrs, opts, epoch, writer_id };
        let thread = peer.runtime().spawn("rpma-log-reconnect", Box::new(move || run(&writer, &m, &tx)))?;
        Ok(Self { mailbox, handovers, thread: Some(thread) })
    }

    /// Tells the thread (it never blocks).
    pub(super) fn tell(&self, r: Request) {
        self.mailbox.requests.lock().unwrap_or_else(PoisonError::into_inner).push_back(r);
        self.mailbox.wake();
    }

    /// Has `waker` (the writer's, of [`Runtime::park`](rpma::runtime::Runtime::park)) woken
    /// after each handover from now on (`None`: no more). Set before the writer looks at the
    /// handovers and parks, a handover between the two wakes its park.
    pub(super) fn wake_on_handover(&self, waker: Option<Waker>) {
        *self.mailbox.writer.lock().unwrap_or_else(PoisonError::into_inner) = waker;
    }

    /// The next connection or failure handed over, without waiting.
    pub(super) fn take(&self) -> Option<Handover<T>> {
        self.handovers.try_recv().ok()
    }
}

impl<T: Transport> Drop for Reconnector<T> {
    /// Ends the thread: it sees the stop flag when it wakes, at once or after the connection
    /// attempt it is making (at most the log's timeout), and is joined.
    fn drop(&mut self) {
        self.mailbox.stop.store(true, Ordering::Release);
        self.mailbox.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Who the thread connects as, and to what.
struct Writer<T: Transport> {
    peer: Peer<T>,
    addrs: Vec<ReplicaAddr>,
    opts: LogOptions,
    epoch: u64,
    writer_id: u64,
}

/// The thread: takes requests, makes the attempts that are due, hands over, parks until the
/// next due attempt or request.
fn run<T: Transport>(w: &Writer<T>, mailbox: &Mailbox, handovers: &Sender<Handover<T>>) {
    let rt = w.peer.runtime();
    *mailbox.waker.lock().unwrap_or_else(PoisonError::into_inner) = Some(rt.waker());
    let n = w.addrs.len();
    // Per replica: its state, the wait after a failed attempt, when the last one failed.
    let mut state = vec![Want::Idle; n];
    let (first, most) = w.opts.backoff;
    let mut backoff = vec![first; n];
    let mut last_failure: Vec<Option<Instant>> = vec![None; n];
    loop {
        if mailbox.stop.load(Ordering::Acquire) {
            return;
        }
        let requests: Vec<Request> =
            mailbox.requests.lock().unwrap_or_else(PoisonError::into_inner).drain(..).collect();
        for r in requests {
            match r {
                // Not before the backoff of its last failure.
                Request::Down(i) if i < n && !matches!(state[i], Want::At(_)) => {
                    state[i] = Want::At(last_failure[i].map_or_else(|| rt.now(), |f| f + backoff[i]));
                }
                // A connection handed over and not taken yet is the one `reconnect` waits for.
                Request::Now(i) if i < n && state[i] != Want::HandedOver => state[i] = Want::At(rt.now()),
                Request::Rejoined(i) if i < n => {
                    // An attempt still due would take the replica over again and kill the
                    // connection the writer just caught up (unless that rule is off).
                    if !(w.opts.rules_off().reconnect_beside_the_thread && matches!(state[i], Want::At(_))) {
                        state[i] = Want::Idle;
                    }
                    backoff[i] = first;
                    last_failure[i] = None;
                }
                _ => {}
            }
        }
        for i in 0..n {
            if mailbox.stop.load(Ordering::Acquire) {
                return;
            }
            match state[i] {
                Want::At(t) if t <= rt.now() => {}
                _ => continue,
            }
            let why = match connect::connect(&w.peer, &w.addrs[i], &w.opts, (w.epoch, w.writer_id, Ask::Reconnect)) {
                Ok(Connected::Accepted(conn, remote, cap)) => {
                    state[i] = Want::HandedOver;
                    // Counted as a failure until the writer says the replica rejoined: a catch-up
                    // that fails (the writer reports the replica down again) waits its backoff.
                    last_failure[i] = Some(rt.now());
                    backoff[i] = (backoff[i] * 2).min(most);
                    if handovers.send(Handover::Connected { replica: i, conn, remote, cap }).is_err() {
                        return;
                    }
                    mailbox.wake_writer();
                    continue;
                }
                Ok(Connected::Stale(p)) => format!("it promised epoch {p}: this writer is fenced"),
                Ok(Connected::Down(why)) => why,
                Err(e) => e.to_string(),
            };
            let now = rt.now();
            last_failure[i] = Some(now);
            state[i] = Want::At(now + backoff[i]);
            backoff[i] = (backoff[i] * 2).min(most);
            if handovers.send(Handover::Failed { replica: i, why }).is_err() {
                return;
            }
            mailbox.wake_writer();
        }
        let empty = mailbox.requests.lock().unwrap_or_else(PoisonError::into_inner).is_empty();
        if empty && !mailbox.stop.load(Ordering::Acquire) {
            let next = state.iter().filter_map(|w| if let Want::At(t) = w { Some(*t) } else { None }).min();
            rt.park(next);
        }
    }
}
