//! Reconnects made by a thread of the log's own ([`LogOptions::reconnect_in_background`]).
//!
//! The writer owns its connections and its ring and is not `Sync`, so the thread never touches
//! them: it only *establishes* new connections to the replicas the writer reports down (the
//! takeover handshake with the writer's epoch and id, with the backoff of `Log::maintain`), and
//! hands each one over through a channel. The writer takes what was handed over when it calls
//! `sync`, `truncate_prefix` or `maintain` (an empty channel costs a `try_recv`: no lock, no
//! allocation) and catches the replica up itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use super::{Connected, Log, LogOptions, ReplicaAddr, MAX_BACKOFF, MIN_BACKOFF};
use rpma::{Conn, MrRemote, Peer, Transport};

/// What the writer tells the thread.
pub(super) enum Request {
    /// The replica is down: connect it again (now, or after its backoff).
    Down(usize),
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

/// The writer's end of the thread.
pub(super) struct Reconnector<T: Transport> {
    requests: Option<Sender<Request>>,
    handovers: Receiver<Handover<T>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
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
        let (requests, rx) = mpsc::channel();
        let (tx, handovers) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let writer = Writer { peer: peer.clone(), addrs, opts, epoch, writer_id };
        let thread = std::thread::Builder::new()
            .name("rpma-log-reconnect".into())
            .spawn(move || run(&writer, &rx, &tx, &flag))?;
        Ok(Self { requests: Some(requests), handovers, stop, thread: Some(thread) })
    }

    /// Tells the thread (it never blocks; a thread that ended is ignored).
    pub(super) fn tell(&self, r: Request) {
        if let Some(s) = &self.requests {
            let _ = s.send(r);
        }
    }

    /// The next connection or failure handed over, without waiting.
    pub(super) fn take(&self) -> Option<Handover<T>> {
        self.handovers.try_recv().ok()
    }
}

impl<T: Transport> Drop for Reconnector<T> {
    /// Ends the thread: it sees the closed channel at once, or the stop flag after the
    /// connection attempt it is making (at most the log's timeout), and is joined.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.requests = None;
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

/// The thread: waits for requests or the next due attempt; connects; hands over.
fn run<T: Transport>(w: &Writer<T>, requests: &Receiver<Request>, handovers: &Sender<Handover<T>>, stop: &AtomicBool) {
    let n = w.addrs.len();
    // Per replica: the next attempt (None: not wanted), the wait after a failed one.
    let mut due: Vec<Option<Instant>> = vec![None; n];
    let mut backoff = vec![MIN_BACKOFF; n];
    let mut last_failure: Vec<Option<Instant>> = vec![None; n];
    loop {
        let next = due.iter().flatten().min().copied();
        let msg = match next {
            Some(t) => requests.recv_timeout(t.saturating_duration_since(Instant::now())),
            None => requests.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match msg {
            Ok(Request::Down(i)) if i < n && due[i].is_none() => {
                // Not before the backoff of its last failure.
                let earliest = last_failure[i].map_or_else(Instant::now, |f| f + backoff[i]);
                due[i] = Some(earliest);
            }
            Ok(Request::Rejoined(i)) if i < n => {
                backoff[i] = MIN_BACKOFF;
                last_failure[i] = None;
            }
            Ok(_) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        for i in 0..n {
            if stop.load(Ordering::Acquire) {
                return;
            }
            if due[i].map_or(true, |t| t > Instant::now()) {
                continue;
            }
            let why = match Log::<T>::connect(&w.peer, &w.addrs[i], &w.opts, w.epoch, w.writer_id) {
                Ok(Connected::Accepted(conn, remote, cap)) => {
                    due[i] = None;
                    // Counted as a failure until the writer says the replica rejoined: a catch-up
                    // that fails (the writer reports the replica down again) waits its backoff.
                    last_failure[i] = Some(Instant::now());
                    backoff[i] = (backoff[i] * 2).min(MAX_BACKOFF);
                    if handovers.send(Handover::Connected { replica: i, conn, remote, cap }).is_err() {
                        return;
                    }
                    continue;
                }
                Ok(Connected::Stale(p)) => format!("it promised epoch {p}: this writer is fenced"),
                Ok(Connected::Down(why)) => why,
                Err(e) => e.to_string(),
            };
            let now = Instant::now();
            last_failure[i] = Some(now);
            due[i] = Some(now + backoff[i]);
            backoff[i] = (backoff[i] * 2).min(MAX_BACKOFF);
            if handovers.send(Handover::Failed { replica: i, why }).is_err() {
                return;
            }
        }
    }
}
