//! The writer: appends, group commit to a quorum, reads, truncation, recovery and repair.

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

use rpma::{
    CompletionFlags, Conn, ConnCfg, ConnEvent, ConnReq, FlushType, MrLocal, MrRemote, Peer, PeerCfg, Transport, Usage,
    MR_DESCRIPTOR_SIZE,
};

use crate::format::{self, Hello, Record, Status};
use crate::{LogError, Lsn, Result};

/// Where a replica listens.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReplicaAddr {
    /// Its address.
    pub addr: String,
    /// Its port (service).
    pub port: String,
}

impl ReplicaAddr {
    /// A replica at `addr`:`port`.
    #[must_use]
    pub fn new(addr: &str, port: &str) -> Self {
        Self { addr: addr.to_owned(), port: port.to_owned() }
    }
}

impl fmt::Display for ReplicaAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.addr, self.port)
    }
}

/// How many replicas must hold an entry before [`Log::sync`] reports it durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Quorum {
    /// Every replica of the set.
    All,
    /// More than half of the set.
    Majority,
    /// `n` replicas (1 to the set's size).
    K(usize),
}

impl Quorum {
    fn of(self, replicas: usize) -> Result<usize> {
        let n = match self {
            Self::All => replicas,
            Self::Majority => replicas / 2 + 1,
            Self::K(k) => k,
        };
        if n == 0 || n > replicas {
            return Err(LogError::Invalid(format!("a quorum of {n} out of {replicas} replicas")));
        }
        Ok(n)
    }
}

/// What "durable" means on the replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FlushMode {
    /// In the persistence domain of each replica of the quorum (persistent flushes; each replica
    /// must announce direct write to pmem): survives a power cut of every replica.
    Persistent,
    /// In the memory of each replica of the quorum (flushes to visibility; DRAM replicas):
    /// survives the loss of a minority of replicas' processes, not a power cut.
    Visibility,
}

/// How a writer opens the log.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LogOptions {
    /// The log's id: replicas of another log refuse the writer.
    pub log_id: u64,
    /// The quorum of [`Log::sync`] and of recovery.
    pub quorum: Quorum,
    /// What durable means.
    pub flush: FlushMode,
    /// The writer's identity, which lets it reconnect within its own epoch (random if `None`).
    pub writer_id: Option<u64>,
    /// The longest wait for a replica: connection, a read at recovery, a sync's completions.
    pub timeout: Duration,
    #[doc(hidden)]
    /// Tests only: flushes the commit record to visibility even in [`FlushMode::Persistent`]
    /// (a deliberately broken log, which the crash tests must catch).
    pub broken_commit_flush: bool,
    #[doc(hidden)]
    /// Tests only: commits without flushing the entries first (a deliberately broken log).
    pub broken_skip_data_flush: bool,
}

impl LogOptions {
    /// Log `log_id` with a majority quorum, persistent, a 5 s timeout.
    #[must_use]
    pub fn new(log_id: u64) -> Self {
        Self {
            log_id,
            quorum: Quorum::Majority,
            flush: FlushMode::Persistent,
            writer_id: None,
            timeout: Duration::from_secs(5),
            broken_commit_flush: false,
            broken_skip_data_flush: false,
        }
    }

    /// Sets the quorum.
    #[must_use]
    pub const fn quorum(mut self, quorum: Quorum) -> Self {
        self.quorum = quorum;
        self
    }

    /// Sets the flush mode.
    #[must_use]
    pub const fn flush(mut self, flush: FlushMode) -> Self {
        self.flush = flush;
        self
    }

    /// Sets the writer's identity.
    #[must_use]
    pub const fn writer_id(mut self, id: u64) -> Self {
        self.writer_id = Some(id);
        self
    }

    /// Sets the timeout.
    #[must_use]
    pub const fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// A replica's health, as the writer sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Health {
    /// Connected, and in the quorum of the last sync.
    Up,
    /// Connected, but its commit record was behind when the last sync returned.
    Lagging,
    /// Not connected (it failed, refused, or was never reached); [`Log::reconnect`] tries again.
    Down,
    /// Being repaired ([`Log::reconnect`]).
    CatchingUp,
}

/// A change of a replica's health.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HealthEvent {
    /// The replica's index in the set given to [`Log::open`].
    pub replica: usize,
    /// Its health now.
    pub health: Health,
    /// Why (for [`Health::Down`]).
    pub reason: Option<String>,
}

/// What [`Log::open`] found and did.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// The writer's epoch (higher than any before it on the replicas it took over).
    pub epoch: u64,
    /// The first lsn held.
    pub head_lsn: Lsn,
    /// The next lsn to append: every entry before it was committed and is kept.
    pub next_lsn: Lsn,
    /// The committed position recovered (bytes of the ring since the log began).
    pub committed: u64,
    /// The replica whose history was taken.
    pub source: Option<usize>,
    /// The replicas brought to that history (the source included).
    pub repaired: Vec<usize>,
    /// The replicas not taken over or repaired, and why.
    pub down: Vec<(usize, String)>,
    /// The replicas whose committed entries failed validation (checksum, position, lsn).
    pub rejected: Vec<(usize, String)>,
}

const SQ: u32 = 128;
/// [`Log::maintain`]'s first wait after a failed reconnect, doubled after each failure up to
/// [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Send-queue slots kept for a commit (two data flushes, an atomic write, a flush, spare).
const RESERVE: u32 = 8;

struct Slot<T: Transport> {
    addr: ReplicaAddr,
    conn: Option<Conn<T>>,
    remote: Option<MrRemote>,
    health: Health,
    /// Data flushes posted up to this position.
    flushed: u64,
    /// Commit records posted up to this position.
    posted: u64,
    /// Commit records completed (durable on this replica) up to this position.
    durable: u64,
    /// Signaled operations in flight.
    inflight: usize,
    /// [`Log::maintain`]: the earliest next reconnect attempt, and the wait after a failed one.
    retry_at: Option<Instant>,
    backoff: Duration,
}

/// A writer of a replicated log.
pub struct Log<T: Transport> {
    peer: Peer<T>,
    opts: LogOptions,
    quorum: usize,
    epoch: u64,
    writer_id: u64,
    cap: u64,
    /// The writer's copy of the ring (every entry not truncated), the source of every write.
    ring: MrLocal<T>,
    /// Where headers and replicas' ranges are read to.
    scratch: MrLocal<T>,
    slots: Vec<Slot<T>>,
    head: u64,
    head_lsn: Lsn,
    tail: u64,
    next_lsn: Lsn,
    /// Positions of the entries `head_lsn..next_lsn`.
    index: VecDeque<u64>,
    /// Positions where records (entries, pads, skips) start, from the head.
    bounds: VecDeque<u64>,
    durable: u64,
    durable_lsn: Lsn,
    events: VecDeque<HealthEvent>,
    /// The record [`Log::append`] builds before copying it into the ring (kept: no allocation
    /// per append).
    rec: Vec<u8>,
}

impl<T: Transport> fmt::Debug for Log<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Log")
            .field("epoch", &self.epoch)
            .field("head_lsn", &self.head_lsn)
            .field("next_lsn", &self.next_lsn)
            .field("durable_lsn", &self.durable_lsn)
            .finish_non_exhaustive()
    }
}

enum Connected<T: Transport> {
    Accepted(Conn<T>, MrRemote, u64),
    Stale(u64),
    Down(String),
}

fn random_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let c = COUNTER.fetch_add(1, Ordering::Relaxed);
    let id = format::checksum(&[&t.to_le_bytes(), &u64::from(std::process::id()).to_le_bytes(), &c.to_le_bytes()]);
    id.max(1)
}

/// The ring offset of `pos` in the replica's region.
fn region_off(cap: u64, pos: u64) -> usize {
    format::HEADER + (pos % cap) as usize
}

/// `[from, to)` of a ring of `cap` bytes as at most two (ring offset, length) pieces.
fn pieces(cap: u64, from: u64, to: u64) -> impl Iterator<Item = (usize, usize)> {
    let len = to.saturating_sub(from);
    let off = from % cap;
    let first = len.min(cap - off);
    [(off as usize, first as usize), (0, (len - first) as usize)].into_iter().filter(|&(_, l)| l > 0)
}

impl<T: Transport> Log<T> {
    /// Opens log `opts.log_id` on `replicas` as a new writer: takes the replicas over with a
    /// new epoch (fencing every earlier writer on them), recovers the committed history from
    /// a quorum, and repairs the replicas it reached to that history.
    ///
    /// # Errors
    /// [`LogError::Invalid`] for an empty or duplicated replica set, or a quorum outside it;
    /// [`LogError::WrongLogId`], [`LogError::CorruptHeader`] or [`LogError::Capacity`] if a
    /// replica holds another log, an invalid header, or a ring of another size than the others;
    /// [`LogError::NoQuorum`] if fewer replicas than needed could be taken over and repaired
    /// (the message gives each one's reason): the quorum `q` of the syncs to come, and `n - q +
    /// 1` of the `n` replicas for recovery, so that it meets every quorum that may have
    /// acknowledged an entry (with [`Quorum::K`]`(1)` of 3, all 3); [`LogError::Rpma`] if local resources fail.
    pub fn open(peer: &Peer<T>, replicas: &[ReplicaAddr], opts: LogOptions) -> Result<(Self, RecoveryReport)> {
        if replicas.is_empty() {
            return Err(LogError::Invalid("no replica given".into()));
        }
        for (i, r) in replicas.iter().enumerate() {
            if replicas[..i].contains(r) {
                return Err(LogError::Invalid(format!("replica {r} is given twice")));
            }
        }
        let quorum = opts.quorum.of(replicas.len())?;
        // Recovery reads enough replicas to meet every quorum that may have acknowledged an
        // entry (n - q + 1), and the writer needs q for its own syncs.
        let open_quorum = quorum.max(replicas.len() - quorum + 1);
        let writer_id = opts.writer_id.unwrap_or_else(random_id);
        let mut epoch = 1;
        let mut report = RecoveryReport::default();
        let mut conns: Vec<Option<(Conn<T>, MrRemote, u64)>>;
        let mut reasons: Vec<Option<String>>;
        let mut round = 0;
        loop {
            round += 1;
            conns = Vec::new();
            reasons = Vec::new();
            let mut stale = None;
            for r in replicas {
                match Self::connect(peer, r, &opts, epoch, writer_id)? {
                    Connected::Accepted(c, m, cap) => {
                        conns.push(Some((c, m, cap)));
                        reasons.push(None);
                    }
                    Connected::Stale(p) => {
                        stale = Some(stale.map_or(p, |s: u64| s.max(p)));
                        conns.push(None);
                        reasons.push(Some(format!("it promised epoch {p}, above {epoch}")));
                    }
                    Connected::Down(why) => {
                        conns.push(None);
                        reasons.push(Some(why));
                    }
                }
            }
            match stale {
                Some(p) if p == u64::MAX => {
                    return Err(LogError::Invalid(format!("a replica promised the last epoch ({p})")));
                }
                Some(p) if round < 8 => {
                    // Another writer took some over: come back above its epoch.
                    for c in conns.iter().flatten() {
                        let _ = c.0.disconnect();
                    }
                    epoch = p + 1;
                }
                _ => break,
            }
        }
        let up = conns.iter().flatten().count();
        if up < open_quorum {
            return Err(no_quorum(up, open_quorum, replicas, &reasons));
        }
        // The capacity: every replica's must agree.
        let mut cap = None;
        for (i, (_, remote, c)) in conns.iter().enumerate().filter_map(|(i, c)| c.as_ref().map(|c| (i, c))) {
            match cap {
                None => cap = Some(*c),
                Some(k) if k != *c => {
                    return Err(LogError::Capacity {
                        replica: replicas[i].to_string(),
                        detail: format!("its ring has {c} bytes, another replica's {k}"),
                    })
                }
                Some(_) => {}
            }
            if remote.len() < (format::HEADER as u64).saturating_add(*c) {
                return Err(LogError::Capacity {
                    replica: replicas[i].to_string(),
                    detail: format!("its region of {} bytes cannot hold a ring of {c}", remote.len()),
                });
            }
        }
        let cap = cap.expect("a quorum is at least one replica");
        let cap_usize = usize::try_from(cap).map_err(|_| LogError::Invalid(format!("a ring of {cap} bytes")))?;
        let ring = peer.alloc_mr(cap_usize, Usage::WRITE_SRC | Usage::READ_DST)?;
        let scratch = peer.alloc_mr(cap_usize.max(format::HEADER), Usage::READ_DST)?;
        let slots = replicas
            .iter()
            .zip(conns)
            .map(|(addr, c)| {
                let (conn, remote) = match c {
                    Some((c, r, _)) => (Some(c), Some(r)),
                    None => (None, None),
                };
                let health = if conn.is_some() { Health::CatchingUp } else { Health::Down };
                Slot {
                    addr: addr.clone(),
                    conn,
                    remote,
                    health,
                    flushed: 0,
                    posted: 0,
                    durable: 0,
                    inflight: 0,
                    retry_at: None,
                    backoff: MIN_BACKOFF,
                }
            })
            .collect();
        let mut log = Self {
            peer: peer.clone(),
            opts,
            quorum,
            epoch,
            writer_id,
            cap,
            ring,
            scratch,
            slots,
            head: 0,
            head_lsn: 0,
            tail: 0,
            next_lsn: 0,
            index: VecDeque::new(),
            bounds: VecDeque::new(),
            durable: 0,
            durable_lsn: 0,
            events: VecDeque::new(),
            rec: Vec::new(),
        };
        report.epoch = epoch;
        for (i, why) in reasons.iter().enumerate() {
            if let Some(why) = why {
                log.event(i, Health::Down, Some(why.clone()));
                report.down.push((i, why.clone()));
            }
        }
        // Each replica's header, checked.
        let mut headers = Vec::new();
        for i in 0..log.slots.len() {
            if log.slots[i].conn.is_none() {
                continue;
            }
            match log.read_header(i) {
                Ok(h) => headers.push((i, h)),
                Err(HeaderError::Fatal(e)) => return Err(e),
                Err(HeaderError::Down(why)) => {
                    log.mark_down(i, why.clone());
                    report.down.push((i, why));
                }
            }
        }
        // The history: the highest commit of the highest epoch that validates.
        headers.sort_by_key(|h| std::cmp::Reverse((h.1.commit_epoch, h.1.commit)));
        let mut source = None;
        for &(i, h) in &headers {
            match log.load_history(i, &h) {
                Ok(()) => {
                    source = Some(i);
                    break;
                }
                Err(why) => {
                    log.mark_down(i, why.clone());
                    report.rejected.push((i, why));
                }
            }
        }
        if source.is_none() {
            let up = 0;
            return Err(LogError::NoQuorum {
                up,
                needed: open_quorum,
                detail: format!("no replica's history validates: {:?}", report.rejected),
            });
        }
        report.source = source;
        // A truncation that reached a replica taken over takes effect: the highest head that is a
        // record boundary of the history (entries below it were durable, and truncated).
        let top = headers
            .iter()
            .map(|(_, h)| h.head)
            .filter(|&p| p > log.head && (p == log.tail || (p < log.tail && log.bounds.contains(&p))))
            .max();
        if let Some(p) = top {
            while log.index.front().is_some_and(|&e| e < p) {
                log.index.pop_front();
                log.head_lsn += 1;
            }
            while log.bounds.front().is_some_and(|&b| b < p) {
                log.bounds.pop_front();
            }
            log.head = p;
        }
        // Every replica taken over, the source first, to that history.
        let order: Vec<(usize, format::Header)> = headers
            .iter()
            .filter(|(i, _)| Some(*i) == source)
            .chain(headers.iter().filter(|(i, _)| Some(*i) != source))
            .copied()
            .collect();
        for (i, h) in order {
            if log.slots[i].conn.is_none() {
                continue;
            }
            match log.repair(i, &h) {
                Ok(()) => report.repaired.push(i),
                Err(why) => {
                    log.mark_down(i, why.clone());
                    report.down.push((i, why));
                }
            }
        }
        let up = log.slots.iter().filter(|s| s.health == Health::Up).count();
        if up < open_quorum {
            let reasons: Vec<Option<String>> = (0..log.slots.len())
                .map(|i| report.down.iter().chain(&report.rejected).find(|(j, _)| *j == i).map(|(_, w)| w.clone()))
                .collect();
            return Err(no_quorum(up, open_quorum, replicas, &reasons));
        }
        log.durable = log.tail;
        log.durable_lsn = log.next_lsn;
        report.head_lsn = log.head_lsn;
        report.next_lsn = log.next_lsn;
        report.committed = log.tail;
        Ok((log, report))
    }

    fn connect(peer: &Peer<T>, r: &ReplicaAddr, opts: &LogOptions, epoch: u64, writer_id: u64) -> Result<Connected<T>> {
        let hello = format::encode_hello(Hello { log_id: opts.log_id, epoch, writer: writer_id });
        let cfg = ConnCfg::new().with_sq_size(SQ).with_cq_size(SQ).with_timeout(opts.timeout);
        let req = match ConnReq::new(peer, &r.addr, &r.port, Some(&cfg)) {
            Ok(req) => req,
            Err(e) => return Ok(Connected::Down(format!("connecting: {e}"))),
        };
        let conn = match req.connect(Some(&hello)) {
            Ok(c) => c,
            Err(e) => return Ok(Connected::Down(format!("connecting: {e}"))),
        };
        match conn.next_event_timeout(opts.timeout) {
            Ok(ConnEvent::Established) => {}
            Ok(ev) => return Ok(Connected::Down(format!("connecting: {}", ev.as_str()))),
            Err(e) => return Ok(Connected::Down(format!("connecting: {e}"))),
        }
        let Some(reply) = format::decode_reply(conn.private_data()) else {
            let _ = conn.disconnect();
            return Ok(Connected::Down("its reply is not an rpma-log reply".into()));
        };
        if reply.log_id != opts.log_id || reply.status == Status::WrongLogId as u32 {
            let _ = conn.disconnect();
            return Err(LogError::WrongLogId { replica: r.to_string(), expected: opts.log_id, found: reply.log_id });
        }
        match reply.status {
            s if s == Status::Accepted as u32 => {}
            s if s == Status::StaleEpoch as u32 => {
                let _ = conn.disconnect();
                return Ok(Connected::Stale(reply.promised));
            }
            s => {
                let _ = conn.disconnect();
                return Ok(Connected::Down(format!("it refused the writer (status {s})")));
            }
        }
        let remote = MrRemote::from_descriptor(&reply.rest[..MR_DESCRIPTOR_SIZE])?;
        let pcfg = PeerCfg::from_descriptor(&reply.rest[MR_DESCRIPTOR_SIZE..])?;
        if opts.flush == FlushMode::Persistent && !pcfg.direct_write_to_pmem() {
            let _ = conn.disconnect();
            return Ok(Connected::Down(
                "it does not write to persistent memory directly: persistent flushes are impossible".into(),
            ));
        }
        conn.apply_remote_peer_cfg(&pcfg);
        if reply.capacity < format::MIN_CAPACITY || reply.capacity % 8 != 0 {
            return Err(LogError::Capacity {
                replica: r.to_string(),
                detail: format!("it announces a ring of {} bytes", reply.capacity),
            });
        }
        Ok(Connected::Accepted(conn, remote, reply.capacity))
    }

    fn event(&mut self, replica: usize, health: Health, reason: Option<String>) {
        self.events.push_back(HealthEvent { replica, health, reason });
    }

    fn set_health(&mut self, i: usize, health: Health) {
        if self.slots[i].health != health {
            self.slots[i].health = health;
            self.event(i, health, None);
        }
    }

    fn mark_down(&mut self, i: usize, why: String) {
        let s = &mut self.slots[i];
        if let Some(c) = s.conn.take() {
            let _ = c.disconnect();
        }
        s.inflight = 0;
        if s.health != Health::Down {
            s.health = Health::Down;
            self.event(i, Health::Down, Some(why));
        }
    }

    fn flush_type(&self) -> FlushType {
        match self.opts.flush {
            FlushMode::Persistent => FlushType::Persistent,
            FlushMode::Visibility => FlushType::Visibility,
        }
    }

    /// Waits for the signaled completion `wr_id` on replica `i` (the only one in flight).
    fn wait_one(&mut self, i: usize, wr_id: u64) -> std::result::Result<(), String> {
        let deadline = Instant::now() + self.opts.timeout;
        let conn = self.slots[i].conn.as_ref().ok_or("not connected")?;
        loop {
            match conn.cq().next_wc() {
                Ok(Some(wc)) if wc.is_success() && wc.wr_id() == wr_id => return Ok(()),
                Ok(Some(wc)) if wc.is_success() => {}
                Ok(Some(wc)) => return Err(format!("a work request failed: {:?}", wc.status())),
                Ok(None) if Instant::now() > deadline => return Err("timed out".into()),
                Ok(None) => std::thread::yield_now(),
                Err(e) => return Err(format!("polling: {e}")),
            }
        }
    }

    fn read_header(&mut self, i: usize) -> std::result::Result<format::Header, HeaderError> {
        let name = self.slots[i].addr.to_string();
        let (Some(conn), Some(remote)) = (self.slots[i].conn.as_ref(), self.slots[i].remote) else {
            return Err(HeaderError::Down("not connected".into()));
        };
        conn.read(self.scratch.slice(0..format::HEADER), remote.at(0))
            .context(1)
            .post()
            .map_err(|e| HeaderError::Down(format!("reading its header: {e}")))?;
        self.wait_one(i, 1).map_err(|e| HeaderError::Down(format!("reading its header: {e}")))?;
        let b = self.scratch.to_vec(0, format::HEADER).map_err(|e| HeaderError::Fatal(e.into()))?;
        let h = format::decode_header(&b, remote.len())
            .map_err(|detail| HeaderError::Fatal(LogError::CorruptHeader { replica: name.clone(), detail }))?;
        if h.log_id != self.opts.log_id {
            return Err(HeaderError::Fatal(LogError::WrongLogId {
                replica: name,
                expected: self.opts.log_id,
                found: h.log_id,
            }));
        }
        if h.capacity != self.cap {
            return Err(HeaderError::Fatal(LogError::Capacity {
                replica: name,
                detail: format!("its header says a ring of {} bytes, its reply {}", h.capacity, self.cap),
            }));
        }
        if h.promised != self.epoch || h.promised_id != self.writer_id {
            return Err(HeaderError::Down(format!("another writer took it over (epoch {})", h.promised)));
        }
        Ok(h)
    }

    /// Reads replica `i`'s range `[from, to)` into `into` (the ring or the scratch region) at
    /// ring offsets.
    fn read_range(&mut self, i: usize, from: u64, to: u64, into_ring: bool) -> std::result::Result<(), String> {
        let (Some(conn), Some(remote)) = (self.slots[i].conn.as_ref(), self.slots[i].remote) else {
            return Err("not connected".into());
        };
        let dst = if into_ring { &self.ring } else { &self.scratch };
        let mut posted = false;
        for (off, len) in pieces(self.cap, from, to) {
            conn.read(dst.slice(off..off + len), remote.at(format::HEADER + off))
                .context(2)
                .post()
                .map_err(|e| format!("reading its entries: {e}"))?;
            posted = true;
        }
        if posted {
            // Each read is signaled: wait for all of them.
            let n = pieces(self.cap, from, to).count();
            for _ in 0..n {
                self.wait_one(i, 2)?;
            }
        }
        Ok(())
    }

    /// Takes replica `i`'s committed history into the writer's ring, validating every record.
    fn load_history(&mut self, i: usize, h: &format::Header) -> std::result::Result<(), String> {
        self.read_range(i, h.head, h.commit, true)?;
        // An empty history has no record to parse: the ring is not copied.
        let ring = if h.commit > h.head {
            self.ring.to_vec(0, self.cap as usize).map_err(|e| e.to_string())?
        } else {
            Vec::new()
        };
        let mut pos = h.head;
        let mut head = h.head;
        let mut head_lsn = h.head_lsn;
        let mut next: Option<Lsn> = None;
        let mut bounds = VecDeque::new();
        let mut index = VecDeque::new();
        while pos < h.commit {
            let rec = format::parse_record(&ring, self.cap, pos, h.commit)?;
            if let Record::Entry { lsn, .. } = rec {
                match next {
                    None if lsn < h.head_lsn => {
                        // Truncated before a crash that kept the head's lsn and not the head.
                        pos += rec.size();
                        head = pos;
                        continue;
                    }
                    None if lsn != h.head_lsn && !(h.head_lsn == 0 && bounds.is_empty()) => {
                        return Err(format!("its first entry has lsn {lsn}, its head says {}", h.head_lsn));
                    }
                    Some(n) if lsn != n => return Err(format!("lsn {lsn} follows lsn {}", n - 1)),
                    _ => {}
                }
                if next.is_none() {
                    head_lsn = lsn;
                }
                next = Some(lsn.checked_add(1).ok_or_else(|| format!("lsn {lsn} at position {pos}"))?);
                index.push_back(pos);
            }
            bounds.push_back(pos);
            pos += rec.size();
        }
        self.head = head;
        self.bounds = bounds.into_iter().filter(|&b| b >= head).collect();
        self.head_lsn = head_lsn;
        self.next_lsn = next.unwrap_or(head_lsn);
        self.index = index;
        self.tail = h.commit;
        Ok(())
    }

    /// The largest record boundary at or below `p` (the head at least).
    fn bound_at_or_below(&self, p: u64) -> u64 {
        if p >= self.tail {
            return self.tail;
        }
        let k = self.bounds.partition_point(|&b| b <= p);
        if k == 0 {
            self.head
        } else {
            self.bounds[k - 1]
        }
    }

    /// Brings replica `i` (header `x`) to the writer's history `[head, tail)` and epoch: the
    /// part of its history equal to the writer's is kept, what differs is uncommitted first,
    /// then rewritten, then committed, then the epoch is installed (docs/log.md, "Repair").
    fn repair(&mut self, i: usize, x: &format::Header) -> std::result::Result<(), String> {
        if x.head > self.head {
            return Err(format!("its head {} is beyond the writer's head {}: it needs a full copy", x.head, self.head));
        }
        self.set_health(i, Health::CatchingUp);
        // Holding nothing of the retained history, it is emptied at its own head first.
        let reset = x.commit < self.head;
        let mut pb = self.head;
        if !reset {
            let cmp_end = x.commit.min(self.tail);
            self.read_range(i, self.head, cmp_end, false)?;
            let mut p = cmp_end;
            // Only the range compared is copied out of the two regions.
            for (off, len) in pieces(self.cap, self.head, cmp_end) {
                let mine = self.ring.to_vec(off, len).map_err(|e| e.to_string())?;
                let theirs = self.scratch.to_vec(off, len).map_err(|e| e.to_string())?;
                if let Some(d) = mine.iter().zip(&theirs).position(|(a, b)| a != b) {
                    // The position of the first difference.
                    let base = self.head
                        + if off as u64 == self.head % self.cap { 0 } else { self.cap - self.head % self.cap };
                    p = base + d as u64;
                    break;
                }
            }
            pb = self.bound_at_or_below(p);
        }
        let lower_to = if reset { (x.commit > x.head).then_some(x.head) } else { (x.commit > pb).then_some(pb) };
        let ft = self.flush_type();
        let epoch = self.epoch;
        let (head, head_lsn, tail, cap) = (self.head, self.head_lsn, self.tail, self.cap);
        let slot = &self.slots[i];
        let (Some(conn), Some(remote)) = (slot.conn.as_ref(), slot.remote) else {
            return Err("not connected".into());
        };
        let quiet = CompletionFlags::ON_ERROR;
        let post = |r: rpma::Result<()>| r.map_err(|e| format!("repairing: {e}"));
        if let Some(to) = lower_to {
            post(conn.atomic_write(remote.at(format::COMMIT), to.to_le_bytes()).flags(quiet).post())?;
            post(conn.flush(remote.slice(format::COMMIT..format::COMMIT + 8), ft).flags(quiet).post())?;
        }
        if x.head < head {
            post(conn.atomic_write(remote.at(format::HEAD_LSN), head_lsn.to_le_bytes()).flags(quiet).post())?;
            post(conn.flush(remote.slice(format::HEAD_LSN..format::HEAD_LSN + 8), ft).flags(quiet).post())?;
            post(conn.atomic_write(remote.at(format::HEAD), head.to_le_bytes()).flags(quiet).post())?;
            post(conn.flush(remote.slice(format::HEAD..format::HEAD + 8), ft).flags(quiet).post())?;
        } else if x.head_lsn != head_lsn {
            post(conn.atomic_write(remote.at(format::HEAD_LSN), head_lsn.to_le_bytes()).flags(quiet).post())?;
            post(conn.flush(remote.slice(format::HEAD_LSN..format::HEAD_LSN + 8), ft).flags(quiet).post())?;
        }
        for (off, len) in pieces(cap, pb, tail) {
            let at = region_off(cap, 0) + off;
            post(conn.write(remote.at(at), self.ring.slice(off..off + len)).flags(quiet).post())?;
            post(conn.flush(remote.slice(at..at + len), ft).flags(quiet).post())?;
        }
        post(conn.atomic_write(remote.at(format::COMMIT), tail.to_le_bytes()).flags(quiet).post())?;
        post(conn.flush(remote.slice(format::COMMIT..format::COMMIT + 8), ft).flags(quiet).post())?;
        post(conn.atomic_write(remote.at(format::COMMIT_EPOCH), epoch.to_le_bytes()).flags(quiet).post())?;
        post(conn.flush(remote.slice(format::COMMIT_EPOCH..format::COMMIT_EPOCH + 8), ft).context(3).post())?;
        self.wait_one(i, 3)?;
        let s = &mut self.slots[i];
        s.flushed = tail;
        s.posted = tail;
        s.durable = tail;
        s.inflight = 0;
        self.set_health(i, Health::Up);
        Ok(())
    }

    /// Appends `data` as the next entry and posts it to every replica up, without waiting.
    /// The entry is durable once [`Log::sync`] returns a position above its lsn.
    ///
    /// # Errors
    /// [`LogError::EntryTooLarge`] if it can never fit the ring; [`LogError::Full`] if it does
    /// not fit before a prefix is truncated; [`LogError::NoQuorum`] if a replica's send queue
    /// had to be drained and the quorum was lost doing it.
    pub fn append(&mut self, data: &[u8]) -> Result<Lsn> {
        let size = format::record_size(data.len() as u64);
        let len32 = u32::try_from(data.len()).ok();
        if size > self.cap || len32.is_none() {
            return Err(LogError::EntryTooLarge { len: data.len(), needed: size, capacity: self.cap });
        }
        let to_end = self.cap - self.tail % self.cap;
        let pre = if to_end < size { to_end } else { 0 };
        let needed = pre + size;
        let free = self.cap - (self.tail - self.head);
        if needed > free {
            return Err(LogError::Full { needed, free });
        }
        // Room in every send queue for these writes and a commit.
        for i in 0..self.slots.len() {
            let low = self.slots[i].conn.as_ref().is_some_and(|c| c.sq_free() < RESERVE);
            if low {
                self.drain(i);
            }
        }
        // The pad's write (if any) and the entry's: (position, length).
        let mut writes = [(0u64, 0usize); 2];
        let mut nw = 0;
        if pre > 0 {
            self.bounds.push_back(self.tail);
            if pre >= format::ENTRY_HEADER as u64 {
                let pad = format::entry_header(
                    format::KIND_PAD,
                    (pre - format::ENTRY_HEADER as u64) as u32,
                    self.next_lsn,
                    self.epoch,
                    self.tail,
                    &[],
                );
                self.ring.write((self.tail % self.cap) as usize, &pad)?;
                writes[nw] = (self.tail, format::ENTRY_HEADER);
                nw += 1;
            }
        }
        let pos = self.tail + pre;
        let lsn = self.next_lsn;
        let mut rec = std::mem::take(&mut self.rec);
        rec.clear();
        rec.resize(size as usize, 0);
        rec[..format::ENTRY_HEADER].copy_from_slice(&format::entry_header(
            format::KIND_ENTRY,
            len32.unwrap_or(0),
            lsn,
            self.epoch,
            pos,
            data,
        ));
        rec[format::ENTRY_HEADER..format::ENTRY_HEADER + data.len()].copy_from_slice(data);
        let written = self.ring.write((pos % self.cap) as usize, &rec);
        let rec_len = rec.len();
        self.rec = rec;
        written?;
        writes[nw] = (pos, rec_len);
        nw += 1;
        self.bounds.push_back(pos);
        self.index.push_back(pos);
        self.tail = pos + size;
        self.next_lsn += 1;
        let cap = self.cap;
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            let (Some(conn), Some(remote)) = (s.conn.as_ref(), s.remote) else { continue };
            if s.health == Health::CatchingUp {
                continue;
            }
            let mut failed = None;
            for &(p, len) in &writes[..nw] {
                let off = (p % cap) as usize;
                let r = conn
                    .write(remote.at(region_off(cap, p)), self.ring.slice(off..off + len))
                    .flags(CompletionFlags::ON_ERROR)
                    .post();
                if let Err(e) = r {
                    failed = Some(format!("posting a write: {e}"));
                    break;
                }
            }
            if let Some(why) = failed {
                self.mark_down(i, why);
            }
        }
        Ok(lsn)
    }

    /// Posts replica `i`'s commit record for everything appended (data flush, atomic write of
    /// the commit position, its flush, signaled).
    fn post_commit(&mut self, i: usize) {
        let tail = self.tail;
        let cap = self.cap;
        let ft = self.flush_type();
        let commit_ft = if self.opts.broken_commit_flush { FlushType::Visibility } else { ft };
        let skip_data = self.opts.broken_skip_data_flush;
        let s = &self.slots[i];
        if s.posted >= tail || s.health == Health::CatchingUp {
            return;
        }
        let (Some(conn), Some(remote)) = (s.conn.as_ref(), s.remote) else { return };
        let quiet = CompletionFlags::ON_ERROR;
        let r = (|| -> rpma::Result<()> {
            let data_from = if skip_data { tail } else { s.flushed };
            for (off, len) in pieces(cap, data_from, tail) {
                let at = format::HEADER + off;
                conn.flush(remote.slice(at..at + len), ft).flags(quiet).post()?;
            }
            conn.atomic_write(remote.at(format::COMMIT), tail.to_le_bytes()).flags(quiet).post()?;
            conn.flush(remote.slice(format::COMMIT..format::COMMIT + 8), commit_ft).context(tail).post()
        })();
        match r {
            Ok(()) => {
                let s = &mut self.slots[i];
                s.flushed = tail;
                s.posted = tail;
                s.inflight += 1;
            }
            Err(e) => self.mark_down(i, format!("posting a commit: {e}")),
        }
    }

    /// Retires what replica `i` has completed; marks it down on an error completion.
    fn poll(&mut self, i: usize) {
        let mut failed = None;
        let s = &mut self.slots[i];
        let Some(conn) = s.conn.as_ref() else { return };
        loop {
            match conn.cq().next_wc() {
                Ok(Some(wc)) if wc.is_success() => {
                    s.durable = s.durable.max(wc.wr_id());
                    s.inflight = s.inflight.saturating_sub(1);
                }
                Ok(Some(wc)) => {
                    failed = Some(format!("a work request failed: {:?}", wc.status()));
                    break;
                }
                Ok(None) => break,
                Err(e) => {
                    failed = Some(format!("polling: {e}"));
                    break;
                }
            }
        }
        if let Some(why) = failed {
            self.mark_down(i, why);
        }
    }

    /// Commits everything appended on replica `i` and waits for it (to free its send queue).
    fn drain(&mut self, i: usize) {
        self.post_commit(i);
        let deadline = Instant::now() + self.opts.timeout;
        while self.slots[i].conn.is_some() && self.slots[i].inflight > 0 {
            self.poll(i);
            if Instant::now() > deadline {
                self.mark_down(i, "timed out".into());
            }
        }
    }

    /// Makes every entry up to `upto` (and every one appended before this call: group commit)
    /// durable on a quorum; returns the durable position: the lsn below which every entry is
    /// durable.
    ///
    /// # Errors
    /// [`LogError::NoEntry`] if `upto` was not appended; [`LogError::NoQuorum`] if fewer
    /// replicas than the quorum completed the commit (failed, fenced, or timed out): the
    /// entries may or may not survive.
    pub fn sync(&mut self, upto: Lsn) -> Result<Lsn> {
        if upto >= self.next_lsn {
            return Err(LogError::NoEntry { lsn: upto, first: self.head_lsn, next: self.next_lsn });
        }
        if upto < self.durable_lsn {
            return Ok(self.durable_lsn);
        }
        let (target, target_lsn) = (self.tail, self.next_lsn);
        for i in 0..self.slots.len() {
            self.post_commit(i);
        }
        let deadline = Instant::now() + self.opts.timeout;
        loop {
            for i in 0..self.slots.len() {
                if self.slots[i].inflight > 0 {
                    self.poll(i);
                }
            }
            let done = self.slots.iter().filter(|s| s.conn.is_some() && s.durable >= target).count();
            if done >= self.quorum {
                break;
            }
            let possible = self.slots.iter().filter(|s| s.conn.is_some() && s.posted >= target).count();
            if possible < self.quorum || Instant::now() > deadline {
                let reasons: Vec<Option<String>> = self
                    .slots
                    .iter()
                    .map(|s| match (s.conn.is_some(), s.durable >= target) {
                        (false, _) => Some("down".to_owned()),
                        (true, false) => Some("commit not completed".to_owned()),
                        (true, true) => None,
                    })
                    .collect();
                let addrs: Vec<ReplicaAddr> = self.slots.iter().map(|s| s.addr.clone()).collect();
                return Err(no_quorum(done, self.quorum, &addrs, &reasons));
            }
            std::thread::yield_now();
        }
        self.durable = target;
        self.durable_lsn = target_lsn;
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            if s.conn.is_some() && s.health != Health::CatchingUp {
                let h = if s.durable >= target { Health::Up } else { Health::Lagging };
                self.set_health(i, h);
            }
        }
        Ok(self.durable_lsn)
    }

    /// [`Log::sync`] of everything appended; returns the durable position (the next lsn).
    ///
    /// # Errors
    /// As [`Log::sync`] (an empty log is durable at once).
    pub fn sync_all(&mut self) -> Result<Lsn> {
        if self.next_lsn == self.durable_lsn {
            return Ok(self.durable_lsn);
        }
        self.sync(self.next_lsn - 1)
    }

    /// The entry `lsn` (appended, durable or not yet, and not truncated), from the writer's copy.
    ///
    /// # Errors
    /// [`LogError::NoEntry`] if it was truncated or never appended.
    pub fn read(&self, lsn: Lsn) -> Result<Vec<u8>> {
        if lsn < self.head_lsn || lsn >= self.next_lsn {
            return Err(LogError::NoEntry { lsn, first: self.head_lsn, next: self.next_lsn });
        }
        let pos = self.index[(lsn - self.head_lsn) as usize];
        let off = (pos % self.cap) as usize;
        let h = self.ring.to_vec(off, format::ENTRY_HEADER)?;
        let len = format::get_u32(&h, 0) as usize;
        Ok(self.ring.to_vec(off + format::ENTRY_HEADER, len)?)
    }

    /// Drops the entries before `lsn`, which must be durable, so that their ring space can be
    /// reused: every replica up commits everything appended, then records the new head
    /// (persistently) before the space is reused.
    ///
    /// # Errors
    /// [`LogError::NoEntry`] if `lsn` is beyond the durable position; [`LogError::NoQuorum`] if
    /// fewer than the quorum recorded the new head.
    pub fn truncate_prefix(&mut self, lsn: Lsn) -> Result<()> {
        if lsn <= self.head_lsn {
            return Ok(());
        }
        if lsn > self.durable_lsn {
            return Err(LogError::NoEntry { lsn, first: self.head_lsn, next: self.durable_lsn });
        }
        let new_head = if lsn == self.next_lsn { self.tail } else { self.index[(lsn - self.head_lsn) as usize] };
        let ft = self.flush_type();
        for i in 0..self.slots.len() {
            if self.slots[i].conn.is_none() || self.slots[i].health == Health::CatchingUp {
                continue;
            }
            self.drain(i);
            let s = &self.slots[i];
            let (Some(conn), Some(remote)) = (s.conn.as_ref(), s.remote) else { continue };
            let quiet = CompletionFlags::ON_ERROR;
            let r = (|| -> rpma::Result<()> {
                conn.atomic_write(remote.at(format::HEAD_LSN), lsn.to_le_bytes()).flags(quiet).post()?;
                conn.flush(remote.slice(format::HEAD_LSN..format::HEAD_LSN + 8), ft).flags(quiet).post()?;
                conn.atomic_write(remote.at(format::HEAD), new_head.to_le_bytes()).flags(quiet).post()?;
                conn.flush(remote.slice(format::HEAD..format::HEAD + 8), ft).context(4).post()
            })();
            let r = r.map_err(|e| e.to_string()).and_then(|()| self.wait_one(i, 4));
            if let Err(why) = r {
                self.mark_down(i, format!("recording the head: {why}"));
            }
        }
        while self.index.front().is_some() && self.head_lsn < lsn {
            self.index.pop_front();
            self.head_lsn += 1;
        }
        while self.bounds.front().is_some_and(|&b| b < new_head) {
            self.bounds.pop_front();
        }
        self.head = new_head;
        let up = self.slots.iter().filter(|s| s.conn.is_some()).count();
        if up < self.quorum {
            let reasons: Vec<Option<String>> =
                self.slots.iter().map(|s| s.conn.is_none().then(|| "down".to_owned())).collect();
            let addrs: Vec<ReplicaAddr> = self.slots.iter().map(|s| s.addr.clone()).collect();
            return Err(no_quorum(up, self.quorum, &addrs, &reasons));
        }
        Ok(())
    }

    /// Connects a replica that is down again (with the writer's own epoch and id) and catches
    /// it up from the writer's copy: what it holds of the writer's history is kept, the rest
    /// copied, then committed. Does nothing for a replica that is connected.
    ///
    /// # Errors
    /// [`LogError::Invalid`] for an index outside the set; [`LogError::NoQuorum`] with the
    /// replica's reason if it cannot be reached or was taken over by another writer (this
    /// writer is fenced there); [`LogError::NeedsFullCopy`] if its head is beyond the writer's
    /// (another writer truncated further there); [`LogError::CorruptHeader`], [`LogError::WrongLogId`],
    /// [`LogError::Capacity`] as for [`Log::open`].
    pub fn reconnect(&mut self, replica: usize) -> Result<()> {
        let addr = self
            .slots
            .get(replica)
            .map(|s| s.addr.clone())
            .ok_or_else(|| LogError::Invalid(format!("no replica {replica} (the set has {})", self.slots.len())))?;
        if self.slots[replica].conn.is_some() {
            return Ok(());
        }
        let down = |why: String| LogError::NoQuorum { up: 0, needed: 1, detail: format!("{addr}: {why}") };
        match Self::connect(&self.peer, &addr, &self.opts, self.epoch, self.writer_id)? {
            Connected::Accepted(conn, remote, cap) => {
                if cap != self.cap {
                    return Err(LogError::Capacity {
                        replica: addr.to_string(),
                        detail: format!("its ring has {cap} bytes, the log's {}", self.cap),
                    });
                }
                let s = &mut self.slots[replica];
                s.conn = Some(conn);
                s.remote = Some(remote);
                s.inflight = 0;
            }
            Connected::Stale(p) => return Err(down(format!("it promised epoch {p}: this writer is fenced"))),
            Connected::Down(why) => return Err(down(why)),
        }
        self.set_health(replica, Health::CatchingUp);
        let h = match self.read_header(replica) {
            Ok(h) => h,
            Err(HeaderError::Fatal(e)) => {
                self.mark_down(replica, e.to_string());
                return Err(e);
            }
            Err(HeaderError::Down(why)) => {
                self.mark_down(replica, why.clone());
                return Err(down(why));
            }
        };
        if h.head > self.head {
            let detail = format!("its head {} is beyond the writer's head {}", h.head, self.head);
            self.mark_down(replica, detail.clone());
            return Err(LogError::NeedsFullCopy { replica: addr.to_string(), detail });
        }
        if let Err(why) = self.repair(replica, &h) {
            self.mark_down(replica, why.clone());
            return Err(down(why));
        }
        Ok(())
    }

    /// Takes the connection events of every replica connected, without waiting: a replica whose
    /// connection was lost or closed (its node died, its process ended) is marked down now,
    /// before anything more is posted to it (otherwise the writer learns it from the error
    /// completions of its next operations).
    pub fn refresh_health(&mut self) {
        for i in 0..self.slots.len() {
            let Some(conn) = self.slots[i].conn.as_ref() else { continue };
            match conn.next_event_timeout(Duration::from_micros(1)) {
                Ok(ConnEvent::Lost) => self.mark_down(i, "its connection was lost".into()),
                Ok(ConnEvent::Closed) => self.mark_down(i, "it closed its connection".into()),
                Ok(ev) => self.mark_down(i, format!("unexpected connection event: {}", ev.as_str())),
                Err(e) if e.kind() == rpma::ErrorKind::NoEvent => {}
                Err(e) => self.mark_down(i, format!("taking its connection events: {e}")),
            }
        }
    }

    /// Looks after the replicas: takes their connection events ([`Log::refresh_health`]), then
    /// tries to reconnect and catch up each replica that is down ([`Log::reconnect`]), with a
    /// backoff per replica: after a failed attempt the next one waits 10 ms, doubled after each
    /// failure up to 2 s, reset by a success. Never blocks longer than the attempts it makes.
    /// Returns the replicas it brought back (each also has its [`HealthEvent`]s); a failure is
    /// a `Down` event with its reason. A replica this writer is fenced on, or one that needs a
    /// full copy, stays down and is tried again after its backoff.
    pub fn maintain(&mut self) -> Vec<usize> {
        self.refresh_health();
        let now = Instant::now();
        let mut back = Vec::new();
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            if s.conn.is_some() || s.retry_at.is_some_and(|t| t > now) {
                continue;
            }
            match self.reconnect(i) {
                Ok(()) => {
                    let s = &mut self.slots[i];
                    s.retry_at = None;
                    s.backoff = MIN_BACKOFF;
                    back.push(i);
                }
                Err(e) => {
                    let s = &mut self.slots[i];
                    s.retry_at = Some(Instant::now() + s.backoff);
                    s.backoff = (s.backoff * 2).min(MAX_BACKOFF);
                    self.event(i, Health::Down, Some(format!("reconnecting: {e}")));
                }
            }
        }
        back
    }

    /// The writer's epoch.
    #[must_use]
    pub const fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The first lsn held (entries before it were truncated).
    #[must_use]
    pub const fn head_lsn(&self) -> Lsn {
        self.head_lsn
    }

    /// The next lsn [`Log::append`] gives.
    #[must_use]
    pub const fn next_lsn(&self) -> Lsn {
        self.next_lsn
    }

    /// The durable position: every entry below it is durable on a quorum.
    #[must_use]
    pub const fn durable_lsn(&self) -> Lsn {
        self.durable_lsn
    }

    /// The position on replica `replica` as this writer knows it from its completions: every
    /// entry below it has its commit record durable there. 0 when nothing is known: for an
    /// index outside the set, or a replica whose last completed commit is below the head.
    #[must_use]
    pub fn durable_on(&self, replica: usize) -> Lsn {
        let Some(s) = self.slots.get(replica) else { return 0 };
        if s.durable < self.head {
            return 0;
        }
        if s.durable >= self.tail {
            return self.next_lsn;
        }
        self.head_lsn + self.index.partition_point(|&p| p < s.durable) as u64
    }

    /// The ring's bytes.
    #[must_use]
    pub const fn capacity(&self) -> u64 {
        self.cap
    }

    /// Each replica's health, in the order of the set.
    #[must_use]
    pub fn health(&self) -> Vec<Health> {
        self.slots.iter().map(|s| s.health).collect()
    }

    /// The health changes since the last call (oldest first).
    pub fn health_events(&mut self) -> Vec<HealthEvent> {
        self.events.drain(..).collect()
    }
}

enum HeaderError {
    Fatal(LogError),
    Down(String),
}

fn no_quorum(up: usize, needed: usize, replicas: &[ReplicaAddr], reasons: &[Option<String>]) -> LogError {
    let detail = replicas
        .iter()
        .zip(reasons)
        .filter_map(|(r, w)| w.as_ref().map(|w| format!("{r}: {w}")))
        .collect::<Vec<_>>()
        .join("; ");
    LogError::NoQuorum { up, needed, detail }
}
