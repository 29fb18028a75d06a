//! The replica: owns a region holding the log, answers writers' connection requests, and
//! otherwise stays out of the data path.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rpma::{Conn, ConnReq, Ep, ErrorKind, Memory, MrLocal, Peer, PeerCfg, Transport, Usage};

use crate::error::{LogError, Result};
use crate::format::{self, Ask, Hello, Status};

/// How a replica serves.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct ReplicaOptions {
    /// Whether the replica tells writers that RDMA writes reach its region's persistence
    /// domain directly (DDIO off, or native persistent flush): persistent flushes need it. On by
    /// default; a replica on DRAM that serves [`FlushMode::Visibility`](crate::FlushMode) writers
    /// may turn it off.
    pub direct_write_to_pmem: bool,
    /// How long one wait for a connection request lasts in [`Replica::serve`] before it looks
    /// at its stop flag again.
    pub poll_interval: Duration,
    /// Tests only (feature `testing`): rules of the protocol switched off.
    #[cfg(feature = "testing")]
    pub broken: crate::broken::Broken,
}

impl ReplicaOptions {
    /// Sets [`ReplicaOptions::direct_write_to_pmem`].
    #[must_use]
    pub const fn with_direct_write_to_pmem(mut self, on: bool) -> Self {
        self.direct_write_to_pmem = on;
        self
    }

    /// Tests only (feature `testing`): switches rules of the protocol off.
    #[cfg(feature = "testing")]
    #[must_use]
    pub const fn with_broken(mut self, broken: crate::broken::Broken) -> Self {
        self.broken = broken;
        self
    }

    /// Sets [`ReplicaOptions::poll_interval`].
    #[must_use]
    pub const fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }
}

impl ReplicaOptions {
    /// The rules switched off: none, unless a test says so.
    #[allow(clippy::missing_const_for_fn)]
    pub(crate) fn rules_off(&self) -> crate::broken::Broken {
        #[cfg(feature = "testing")]
        return self.broken;
        #[cfg(not(feature = "testing"))]
        crate::broken::Broken::none()
    }
}

impl Default for ReplicaOptions {
    fn default() -> Self {
        Self {
            direct_write_to_pmem: true,
            poll_interval: Duration::from_millis(20),
            #[cfg(feature = "testing")]
            broken: crate::broken::Broken::none(),
        }
    }
}

/// What a replica's header says now (a copy; the writer may change it at any time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicaState {
    /// The log's id.
    pub log_id: u64,
    /// The ring's bytes.
    pub capacity: u64,
    /// The highest epoch a writer took the log over with (fencing: lower ones are refused).
    pub promised: u64,
    /// The epoch of the writer that last installed its history here.
    pub commit_epoch: u64,
    /// The position of the first entry held.
    pub head: u64,
    /// The commit word: the records before it are committed; the history goes on beyond it with
    /// the records of the commit epoch that follow (its tail, which only a recovery reads).
    pub commit: u64,
    /// Whether it votes: formatted for a new log, or repaired by a writer since it was
    /// formatted as a replacement ([`Replica::format_replacement`]).
    pub joined: bool,
}

pub(crate) const USAGE: Usage =
    Usage::WRITE_DST.union(Usage::READ_SRC).union(Usage::FLUSH_TYPE_PERSISTENT).union(Usage::FLUSH_TYPE_VISIBILITY);

/// A replica of one log: its region (a header and a ring), registered on `peer`.
///
/// Made with [`Replica::format`] (a new, empty log) or [`Replica::open`] (a region that holds
/// one), then [`Replica::listen`], then [`Replica::serve`] (or [`Replica::spawn`] for a thread).
/// A writer's connection request carries its log id and epoch; the replica takes a request
/// with a higher epoch than it promised before (or the same epoch from the same writer), and
/// then, before accepting it: fences the previous writer by taking its connection down (its
/// queue pair leaves the connected state and is destroyed: what that writer still sends is
/// dropped), and records and persists the new promised epoch. The region stays registered as it
/// is, and nothing else is persisted: the new writer makes durable what it keeps of the history
/// it reads (docs/log.md, "Fencing"). Requests with a lower epoch, another log id or a malformed
/// hello are accepted with a refusal and disconnected.
pub struct Replica<T: Transport> {
    peer: Peer<T>,
    mr: Option<MrLocal<T>>,
    log_id: u64,
    capacity: u64,
    opts: ReplicaOptions,
    ep: Option<Ep<T>>,
    writer: Option<Conn<T>>,
    refused: Vec<Conn<T>>,
    takeovers: u64,
    /// How long the last request served took to answer, from its arrival on.
    answered_in: Option<Duration>,
    /// Incoming requests that failed in a row (see [`Replica::serve_once`]).
    failed_requests: u32,
}

/// Incoming requests that may fail in a row before [`Replica::serve_once`] gives up on its
/// endpoint.
const MAX_FAILED_REQUESTS: u32 = 64;

impl<T: Transport> std::fmt::Debug for Replica<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("log_id", &self.log_id)
            .field("capacity", &self.capacity)
            .field("takeovers", &self.takeovers)
            .finish_non_exhaustive()
    }
}

impl<T: Transport> Replica<T> {
    /// Formats `memory` as a replica of a **new**, empty log `log_id` (its whole length after the
    /// header is the ring, rounded down to 8 bytes), persists it, and registers it on `peer`.
    /// The whole region is zeroed first: records a log it held before left in the ring carry
    /// the epochs, positions and lsns the new log's first writers give theirs, and a recovery
    /// would take them beyond a tail as the new log's (the cost grows with the region: a
    /// write and a persist of all of it, once). A format cut short by a crash leaves a header
    /// of zeros (no log: format it again) or the new log.
    /// It votes at once, with its empty history: format every replica of a new log so (once),
    /// and a replica that replaces one whose region was lost with
    /// [`Replica::format_replacement`].
    ///
    /// # Errors
    /// [`LogError::Capacity`] if the memory cannot hold the header and the smallest ring;
    /// [`LogError::Rpma`] if registering or persisting fails.
    pub fn format(peer: &Peer<T>, memory: Memory, log_id: u64) -> Result<Self> {
        Self::format_as(peer, memory, log_id, true)
    }

    /// Formats `memory` as a replica of the existing log `log_id` that lost its region (a DRAM
    /// replica restarted, a pmem region formatted anew): blank, it takes no part in any quorum
    /// and takes no writer back until a writer that recovered the log from a read quorum has
    /// repaired it (docs/log.md, "Amnesia"). What it held is not counted on.
    ///
    /// # Errors
    /// As [`Replica::format`].
    pub fn format_replacement(peer: &Peer<T>, memory: Memory, log_id: u64) -> Result<Self> {
        Self::format_as(peer, memory, log_id, false)
    }

    fn format_as(peer: &Peer<T>, memory: Memory, log_id: u64, joined: bool) -> Result<Self> {
        let len = memory.len() as u64;
        let Some(capacity) = format::ring_capacity(len) else {
            return Err(LogError::Capacity {
                replica: "local".into(),
                detail: format!(
                    "a region of {len} bytes is too small: the header takes {} and the ring at least {}",
                    format::HEADER,
                    format::MIN_CAPACITY
                ),
            });
        };
        let v = memory.volatile();
        // The old header goes first (a crash from here on leaves no log), then everything the
        // ring held: zeroes, durable before the new header says "an empty log".
        // Zeroes: promised 0 (any writer's open is above it), commit epoch 0, an empty history.
        v.write(0, &[0u8; format::HEADER])?;
        memory.persist(0, format::HEADER)?;
        v.fill(0);
        memory.persist(0, memory.len())?;
        v.write(0, &format::static_block(log_id, capacity))?;
        v.write(format::JOINED, &u64::from(joined).to_le_bytes())?;
        let mr = peer.reg_mr(memory, USAGE)?;
        mr.persist(0, format::HEADER)?;
        Ok(Self::new(peer, mr, log_id, capacity))
    }

    /// Opens `memory` holding log `log_id` (e.g. a pmem mapping after a restart, or what a power
    /// cut left) and registers it on `peer`.
    ///
    /// # Errors
    /// [`LogError::CorruptHeader`] if the header is not a valid rpma-log header (magic number,
    /// checksums, positions); [`LogError::WrongLogId`] if it holds another log;
    /// [`LogError::Rpma`] if registering fails.
    pub fn open(peer: &Peer<T>, memory: Memory, log_id: u64) -> Result<Self> {
        let mut head = vec![0u8; format::HEADER.min(memory.len())];
        memory.volatile().read(0, &mut head)?;
        let h = format::decode_header(&head, memory.len() as u64)
            .map_err(|detail| LogError::CorruptHeader { replica: "local".into(), detail })?;
        if h.log_id != log_id {
            return Err(LogError::WrongLogId { replica: "local".into(), expected: log_id, found: h.log_id });
        }
        let mr = peer.reg_mr(memory, USAGE)?;
        Ok(Self::new(peer, mr, log_id, h.capacity))
    }

    fn new(peer: &Peer<T>, mr: MrLocal<T>, log_id: u64, capacity: u64) -> Self {
        Self {
            peer: peer.clone(),
            mr: Some(mr),
            log_id,
            capacity,
            opts: ReplicaOptions::default(),
            ep: None,
            writer: None,
            refused: Vec::new(),
            takeovers: 0,
            answered_in: None,
            failed_requests: 0,
        }
    }

    /// Sets how the replica serves.
    #[must_use]
    pub fn with_options(mut self, opts: ReplicaOptions) -> Self {
        self.opts = opts;
        self
    }

    /// Listens for writers at `addr`:`port`.
    ///
    /// # Errors
    /// [`LogError::Rpma`] if listening fails (e.g. the port is taken).
    pub fn listen(mut self, addr: &str, port: &str) -> Result<Self> {
        self.ep = Some(Ep::listen(&self.peer, addr, port)?);
        Ok(self)
    }

    /// The log's id.
    #[must_use]
    pub const fn log_id(&self) -> u64 {
        self.log_id
    }

    /// How many writers took the log over here (each one fenced the writer before it).
    #[must_use]
    pub const fn takeovers(&self) -> u64 {
        self.takeovers
    }

    /// How long the last request [`Replica::serve_once`] served took to answer, on the
    /// transport's clock: from the moment it was taken off the endpoint to the answer sent (a
    /// takeover's fence and promise included, the wait for the request not). `None` before the
    /// first.
    #[must_use]
    pub const fn answered_in(&self) -> Option<Duration> {
        self.answered_in
    }

    fn region(&self) -> Result<&MrLocal<T>> {
        self.mr.as_ref().ok_or_else(|| LogError::Replica("the region was given back".into()))
    }

    /// What the region holds now, read as a recovery reads it ([`check_region`](crate::check_region)
    /// of its bytes): the header, the committed records, then the tail; the history's entries.
    ///
    /// # Errors
    /// As [`check_region`](crate::check_region); [`LogError::Replica`] if the region was lost.
    pub fn check(&self) -> Result<crate::check::RegionCheck> {
        let mr = self.region()?;
        crate::check::check_region(&mr.to_vec(0, mr.len())?)
    }

    /// What the header says now.
    ///
    /// # Errors
    /// [`LogError::CorruptHeader`] if it is not valid (a writer wrote garbage into it);
    /// [`LogError::Replica`] if the region was lost.
    pub fn state(&self) -> Result<ReplicaState> {
        let mr = self.region()?;
        let b = mr.to_vec(0, format::HEADER)?;
        let h = format::decode_header(&b, mr.len() as u64)
            .map_err(|detail| LogError::CorruptHeader { replica: "local".into(), detail })?;
        Ok(ReplicaState {
            log_id: h.log_id,
            capacity: h.capacity,
            promised: h.promised,
            commit_epoch: h.commit_epoch,
            head: h.head,
            commit: h.commit,
            joined: h.joined,
        })
    }

    /// Waits up to `timeout` for one writer's connection request and answers it. Returns
    /// whether a request was handled. A request that fails on its way in (a provider error: its
    /// writer gave up first, or its queues could not be built) is skipped: the replica pauses
    /// for its poll interval and returns `Ok(false)`.
    ///
    /// # Errors
    /// [`LogError::Invalid`] if the replica is not listening; [`LogError::Rpma`] if the
    /// endpoint fails (e.g. the node lost power), or after 64 incoming requests failed in a row
    /// with nothing served between them; [`LogError::Replica`] if the region was given back,
    /// or recording a writer's promise failed (the replica cannot serve any more).
    pub fn serve_once(&mut self, timeout: Duration) -> Result<bool> {
        let ep = self.ep.as_ref().ok_or_else(|| LogError::Invalid("the replica is not listening".into()))?;
        let req = match ep.next_conn_req_timeout(None, timeout) {
            Ok(r) => r,
            Err(e) if e.kind() == ErrorKind::NoEvent => return Ok(false),
            // A request that failed on its way in (its writer gave up and destroyed its side
            // first, or the provider could not build its queues) is that writer's loss: the
            // replica serves the next one. Only a run of failures with nothing served between
            // them ends it (the endpoint itself is failing).
            Err(e) if e.kind() == ErrorKind::Provider && self.failed_requests < MAX_FAILED_REQUESTS => {
                self.failed_requests += 1;
                let rt = self.peer.runtime();
                rt.pause(rt.now() + timeout.min(self.opts.poll_interval));
                return Ok(false);
            }
            Err(e) => return Err(e.into()),
        };
        self.failed_requests = 0;
        let t0 = self.peer.runtime().now();
        let answered = self.answer(req);
        self.answered_in = Some(self.peer.runtime().now().saturating_duration_since(t0));
        answered?;
        Ok(true)
    }

    /// Serves writers until `stop` is set (checked every [`ReplicaOptions::poll_interval`]).
    ///
    /// # Errors
    /// As [`Replica::serve_once`].
    pub fn serve(&mut self, stop: &AtomicBool) -> Result<()> {
        while !stop.load(Ordering::Acquire) {
            self.serve_once(self.opts.poll_interval)?;
        }
        Ok(())
    }

    /// Serves on a thread of its own; [`ReplicaHandle::stop`] ends it and gives the memory back.
    #[must_use]
    pub fn spawn(mut self) -> ReplicaHandle
    where
        T: 'static,
        Self: Send,
    {
        let state = Arc::new(AtomicU8::new(RUN));
        let flag = Arc::clone(&state);
        let thread = std::thread::spawn(move || {
            while flag.load(Ordering::Acquire) == RUN {
                self.serve_once(self.opts.poll_interval)?;
            }
            if flag.load(Ordering::Acquire) == KILL {
                // A process killed: nothing is released in order, the region is not given back.
                return Err(LogError::Replica("killed".into()));
            }
            self.into_memory()
        });
        ReplicaHandle { state, thread: Some(thread) }
    }

    /// Stops serving (drops the writer's connection and the endpoint) and gives the region's
    /// memory back.
    ///
    /// # Errors
    /// [`LogError::Replica`] if the region is still in use (its memory is then released when
    /// the use ends) or was lost; [`LogError::Rpma`] if deregistration fails.
    pub fn into_memory(mut self) -> Result<Memory> {
        self.writer = None;
        self.refused.clear();
        self.ep = None;
        let mr = self.mr.take().ok_or_else(|| LogError::Replica("the region was lost".into()))?;
        mr.dereg()?.ok_or_else(|| LogError::Replica("the region is still in use".into()))
    }

    fn answer(&mut self, req: ConnReq<T>) -> Result<()> {
        // Connections refused earlier have had their time to see the refusal.
        if self.refused.len() >= 8 {
            self.refused.remove(0);
        }
        let region = self.region()?;
        let b = region.to_vec(0, format::HEADER)?;
        let header = format::decode_header(&b, region.len() as u64)
            .map_err(|detail| LogError::CorruptHeader { replica: "local".into(), detail })?;
        let (log_id, capacity) = (self.log_id, self.capacity);
        let refuse = |status: Status| format::encode_reply(status, log_id, header.promised, capacity, &[]);
        let reply = match format::decode_hello(req.private_data()) {
            None => refuse(Status::BadHello),
            Some(h) if h.log_id != self.log_id => refuse(Status::WrongLogId),
            Some(h) if !self.accepts(&h, &header) => refuse(Status::StaleEpoch),
            Some(h) => {
                match self.take_over(h.epoch, h.writer, (h.epoch, h.writer) != (header.promised, header.promised_id)) {
                    Ok(mr) => {
                        let mut rest = mr.descriptor().to_vec();
                        rest.extend_from_slice(
                            &PeerCfg::new().with_direct_write_to_pmem(self.opts.direct_write_to_pmem).descriptor(),
                        );
                        format::encode_reply(Status::Accepted, self.log_id, h.epoch, self.capacity, &rest)
                    }
                    Err(e) => {
                        let reply = refuse(Status::Failed);
                        if let Ok(conn) = req.connect(Some(&reply)) {
                            let _ = conn.disconnect();
                        }
                        return Err(e);
                    }
                }
            }
        };
        let accepted = format::decode_reply(&reply).is_some_and(|r| r.status == Status::Accepted as u32);
        // The writer is gone (it gave up waiting, or died) or the link failed: nobody to answer,
        // and nothing wrong with this replica, which serves the next request.
        let Ok(conn) = req.connect(Some(&reply)) else { return Ok(()) };
        if accepted {
            self.writer = Some(conn);
        } else {
            let _ = conn.disconnect();
            self.refused.push(conn);
        }
        Ok(())
    }

    /// Whether the hello `h` may take the log over here, the header saying `header` (docs/log.md,
    /// "Safety"):
    /// - a new writer's open needs an epoch above every one promised here, whatever its writer
    ///   id (so no two opens ever share an epoch);
    /// - a writer coming back (a reconnect) is taken if the promise is still its own, epoch and
    ///   writer id, or if its epoch is above the promise and the replica has joined. A blank
    ///   replacement (formatted after its region was lost, not repaired since) lost its promises
    ///   with its memory, so it takes nobody back: only an open, whose writer needs a read quorum
    ///   of replicas that did not forget.
    fn accepts(&self, h: &Hello, header: &format::Header) -> bool {
        if h.epoch == 0 {
            return false;
        }
        let own = h.epoch == header.promised && h.writer == header.promised_id;
        if self.opts.rules_off().open_in_the_promised_epoch && own {
            return true;
        }
        match h.ask {
            Ask::Open => h.epoch > header.promised,
            Ask::Reconnect => own || (h.epoch > header.promised && header.joined),
        }
    }

    /// Fences the previous writer and, if `promise` (the promise changes), records and persists
    /// the new one, each word on its own.
    ///
    /// The fence is the previous writer's queue pair here: disconnected (it leaves the connected
    /// state: what arrives after is dropped, the sender's retries run out), then destroyed. Its
    /// writes that landed before stay in the region, durable or not; the new writer flushes
    /// what it keeps of them before it relies on them (docs/log.md, "Fencing").
    fn take_over(&mut self, epoch: u64, writer: u64, promise: bool) -> Result<&MrLocal<T>> {
        if let Some(old) = self.writer.take() {
            if self.opts.rules_off().fence_keeps_connection {
                self.refused.push(old);
            } else {
                // A failed disconnect (the connection was lost already) leaves the queue pair in
                // the error state all the same; dropping it destroys it.
                let _ = old.disconnect();
                drop(old);
            }
        }
        let mr = self.region()?;
        if promise {
            self.promise(mr, epoch, writer)?;
        }
        self.takeovers += 1;
        self.region()
    }

    /// Records the promise of `epoch` to `writer` durably before the writer is told: the writer
    /// id, then the epoch, each an 8-byte store persisted on its own (a power cut leaves each
    /// word old or new; every mix is a valid header whose promise is not below the old one).
    fn promise(&self, mr: &MrLocal<T>, epoch: u64, writer: u64) -> Result<()> {
        let v = mr.volatile();
        if self.opts.rules_off().epoch_block_checksum {
            // Version 1: one 64-byte block with a checksum, copied, then persisted.
            v.write(format::PROMISED, &format::epoch_block(epoch, writer))?;
            mr.persist(format::PROMISED, 64)?;
            return Ok(());
        }
        v.store_u64(format::PROMISED_ID, writer.to_le(), Ordering::Relaxed)?;
        mr.persist(format::PROMISED_ID, 8)?;
        v.store_u64(format::PROMISED, epoch.to_le(), Ordering::Relaxed)?;
        mr.persist(format::PROMISED, 8)?;
        Ok(())
    }
}

const RUN: u8 = 0;
const STOP: u8 = 1;
const KILL: u8 = 2;

/// A replica serving on its own thread ([`Replica::spawn`]). Dropping it kills the replica
/// ([`ReplicaHandle::kill`]).
#[derive(Debug)]
pub struct ReplicaHandle {
    state: Arc<AtomicU8>,
    thread: Option<JoinHandle<Result<Memory>>>,
}

impl ReplicaHandle {
    /// Whether the serving thread has ended (stopped, or failed: e.g. its node lost power).
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().map_or(true, JoinHandle::is_finished)
    }

    /// Stops the replica and gives its region's memory back.
    ///
    /// # Errors
    /// What ended the serving thread ([`Replica::serve`]'s errors, e.g. a power cut of its
    /// node), or [`LogError::Replica`] if it panicked.
    pub fn stop(mut self) -> Result<Memory> {
        self.state.store(STOP, Ordering::Release);
        let thread = self.thread.take().ok_or_else(|| LogError::Replica("already stopped".into()))?;
        thread.join().map_err(|_| LogError::Replica("the serving thread panicked".into()))?
    }

    /// Ends the replica as a killed process ends: its connection and endpoint are dropped and
    /// its region is deregistered by being dropped, without giving the memory back (use it for
    /// a replica whose node lost power, whose region cannot be handed back in order).
    pub fn kill(mut self) {
        self.state.store(KILL, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for ReplicaHandle {
    fn drop(&mut self) {
        self.state.store(KILL, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
