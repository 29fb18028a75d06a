//! The writer: appends, group commit to a quorum, reads, truncation, recovery and repair.

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

use rpma::{
    CompletionFlags, Conn, ConnCfg, ConnEvent, ConnReq, ErrorKind, FlushType, MrLocal, MrRemote, Peer, PeerCfg,
    Transport, Usage,
};

use crate::format::{self, Ask, Hello, Record, Status};
use crate::{LogError, Lsn, Result};

#[cfg(test)]
mod compare_tests;
mod health;
#[cfg(test)]
mod lying_replica_tests;
mod options;
mod reconnector;
mod recovery;

pub use options::{FlushMode, Health, HealthEvent, LogOptions, Quorum, RecoveryReport, ReplicaAddr};

/// Each replica connection's send (and completion) queue: room for a group commit of 128
/// appends and its commit without draining the queue mid-group (with 128, a group of 128
/// drained each replica in turn, waiting: 0.63x the plain writes' rate on rxe). Not more: with
/// 512, rxe (6.12) stopped completing a live replica's operations after another replica's
/// process was killed with hundreds of writes in flight to it (tests/verbs.rs).
const SQ: u32 = 256;
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
    /// The thread of [`LogOptions::reconnect_in_background`], if asked for.
    reconnector: Option<reconnector::Reconnector<T>>,
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
    /// Connects to replica `r` with a hello asking `ask` in `epoch` as `writer_id`.
    fn connect(
        peer: &Peer<T>,
        r: &ReplicaAddr,
        opts: &LogOptions,
        (epoch, writer_id, ask): (u64, u64, Ask),
    ) -> Result<Connected<T>> {
        let hello = format::encode_hello(Hello { log_id: opts.log_id, epoch, writer: writer_id, ask });
        let mut cfg = ConnCfg::new().with_sq_size(SQ).with_cq_size(SQ).with_timeout(opts.timeout);
        if let Some(n) = opts.ack_timeout {
            cfg = cfg.with_ack_timeout(n);
        }
        if let Some(n) = opts.retry_count {
            cfg = cfg.with_retry_count(n);
        }
        let req = match ConnReq::new(peer, &r.addr, &r.port, Some(&cfg)) {
            Ok(req) => req,
            // A setting of the options out of range is the caller's, whichever replica.
            Err(e) if e.kind() == ErrorKind::InvalidInput => return Err(e.into()),
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
        let remote = MrRemote::from_descriptor(&reply.rest[..MrRemote::DESCRIPTOR_SIZE])?;
        let pcfg = PeerCfg::from_descriptor(&reply.rest[MrRemote::DESCRIPTOR_SIZE..])?;
        if opts.flush == FlushMode::Persistent && !pcfg.direct_write_to_pmem() {
            let _ = conn.disconnect();
            return Ok(Connected::Down(
                "it does not write to persistent memory directly: persistent flushes are impossible (a writer \
                 flushing to visibility, FlushMode::Visibility, is served)"
                    .into(),
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
        let at = self.peer.runtime().now();
        self.events.push_back(HealthEvent { replica, health, reason, at });
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
            if let Some(r) = &self.reconnector {
                r.tell(reconnector::Request::Down(i));
            }
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
        let rt = self.peer.runtime();
        let deadline = rt.now() + self.opts.timeout;
        let conn = self.slots[i].conn.as_ref().ok_or("not connected")?;
        loop {
            match conn.cq().next_wc() {
                Ok(Some(wc)) if wc.is_success() && wc.wr_id() == wr_id => return Ok(()),
                Ok(Some(wc)) if wc.is_success() => {}
                Ok(Some(wc)) => return Err(format!("a work request failed: {:?}", wc.status())),
                Ok(None) if rt.now() > deadline => return Err("timed out".into()),
                Ok(None) => rt.pause(deadline),
                Err(e) => return Err(format!("polling: {e}")),
            }
        }
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
        let broken = self.opts.rules_off();
        let commit_ft = if broken.commit_flush_visibility { FlushType::Visibility } else { ft };
        let skip_data = broken.skip_data_flush;
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
        let deadline = self.peer.runtime().now() + self.opts.timeout;
        while self.slots[i].conn.is_some() && self.slots[i].inflight > 0 {
            self.poll(i);
            if self.peer.runtime().now() > deadline {
                self.mark_down(i, "timed out".into());
            } else if self.slots[i].inflight > 0 {
                self.peer.runtime().pause(deadline);
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
        if self.reconnector.is_some() {
            self.take_handovers();
        }
        let (target, target_lsn) = (self.tail, self.next_lsn);
        for i in 0..self.slots.len() {
            self.post_commit(i);
        }
        let deadline = self.peer.runtime().now() + self.opts.timeout;
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
            if possible < self.quorum || self.peer.runtime().now() > deadline {
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
            self.peer.runtime().pause(deadline);
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
    /// [`LogError::NotDurable`] if entries before `lsn` are appended but not durable yet;
    /// [`LogError::NoEntry`] if `lsn` is beyond the next lsn to append; [`LogError::NoQuorum`] if
    /// fewer than the quorum recorded the new head.
    pub fn truncate_prefix(&mut self, lsn: Lsn) -> Result<()> {
        if lsn <= self.head_lsn {
            return Ok(());
        }
        if lsn > self.next_lsn {
            return Err(LogError::NoEntry { lsn, first: self.head_lsn, next: self.next_lsn });
        }
        if lsn > self.durable_lsn {
            return Err(LogError::NotDurable {
                lsn,
                first: self.head_lsn,
                durable: self.durable_lsn,
                next: self.next_lsn,
            });
        }
        if self.reconnector.is_some() {
            self.take_handovers();
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
