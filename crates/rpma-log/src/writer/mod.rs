//! The writer: appends, group commit to a quorum, reads, truncation, recovery and repair.

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

use rpma::op::Batch;
use rpma::{CompletionFlags, Conn, ConnEvent, ErrorKind, FlushType, MrLocal, MrRemote, Peer, Transport};

use crate::error::{LogError, Lsn, Result};
use crate::format::{self, Ask, Record};

mod clock;
#[cfg(test)]
mod compare_tests;
mod connect;
mod health;
#[cfg(test)]
mod lying_replica_tests;
mod options;
mod reconnector;
mod recovery;
mod repair;
mod standby;
mod wait;

pub use options::{FlushMode, Health, HealthEvent, LogOptions, OpenPhases, Quorum, RecoveryReport, ReplicaAddr, Wait};
pub use standby::Standby;

use connect::Connected;

/// The most operations of one batch (one doorbell); a sync's batch of a replica holds at most
/// five unless its range is larger than [`MAX_WR`]. This many send-queue slots must be free
/// before a batch is posted.
const BATCH: usize = 16;
/// The largest write, read or flush of one work request (1 GiB, below the 2 GiB maximum
/// message of RDMA devices and a scatter-gather entry's 32-bit length); a larger range is
/// posted in pieces.
const MAX_WR: usize = 1 << 30;

struct Slot<T: Transport> {
    addr: ReplicaAddr,
    conn: Option<Conn<T>>,
    remote: Option<MrRemote>,
    health: Health,
    /// The ring written and flushed (posted) up to this position on this connection.
    posted: u64,
    /// Flushes completed (durable on this replica) up to this position.
    durable: u64,
    /// The value of its commit word as this writer last wrote it.
    committed: u64,
    /// Signaled operations in flight.
    inflight: usize,
    /// [`Wait::Sleep`]: a completion event a sleep saw on its channel and not taken yet (its
    /// CQ is not armed until it is taken, [`Log::idle`]).
    event: bool,
    /// [`Log::maintain`]: the earliest next reconnect attempt, and the wait after a failed one.
    retry_at: Option<Instant>,
    backoff: Duration,
}

/// What [`Log::begin_sync`] did.
pub(crate) enum Begun {
    /// Everything up to the lsn asked for was durable already: the durable position.
    Done(Lsn),
    /// The batches are posted: [`Log::poll_sync`] until it answers.
    Pending(PendingSync),
}

/// A sync posted and not answered yet ([`Log::poll_sync`]).
pub(crate) struct PendingSync {
    /// The ring position a quorum must have made durable.
    target: u64,
    /// The durable position then.
    target_lsn: Lsn,
    /// When the sync fails if no quorum completed it (on the transport's clock).
    pub(crate) deadline: Instant,
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
    /// A sync carries a replica's commit word when its durable position moved more than this
    /// (an eighth of the ring) since the word was last written: it bounds the tail a recovery
    /// scans (docs/log.md, "Writing and committing").
    commit_every: u64,
    events: VecDeque<HealthEvent>,
    /// The record [`Log::append`] builds before copying it into the ring (kept: no allocation
    /// per append).
    rec: Vec<u8>,
    /// The ring's bytes as a recovery or a repair read them from a replica, to parse (one
    /// buffer for every scan of an open: a ring-sized allocation per scan was, on rxe in the
    /// guest, most of the history's phase at 64 MiB, its pages zeroed as each scan touched
    /// them). Released once the open returns; a standby makes it ahead.
    view: Vec<u8>,
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

/// `[from, to)` of a ring of `cap` bytes as the (ring offset, length) pieces one work request
/// each takes: none crosses the ring's end or is longer than [`MAX_WR`].
fn chunks(cap: u64, from: u64, to: u64) -> impl Iterator<Item = (usize, usize)> {
    chunked(pieces(cap, from, to), MAX_WR)
}

/// `pieces` cut in pieces of at most `max` bytes.
fn chunked(pieces: impl Iterator<Item = (usize, usize)>, max: usize) -> impl Iterator<Item = (usize, usize)> {
    pieces.flat_map(move |(off, len)| (0..len).step_by(max).map(move |k| (off + k, (len - k).min(max))))
}

impl<T: Transport> Log<T> {
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
        s.event = false;
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
        let deadline = self.peer.runtime().now() + self.opts.timeout;
        loop {
            let conn = self.slots[i].conn.as_ref().ok_or("not connected")?;
            match conn.cq().next_wc() {
                Ok(Some(wc)) if wc.is_success() && wc.wr_id() == wr_id => return Ok(()),
                Ok(Some(wc)) if wc.is_success() => {}
                Ok(Some(wc)) => return Err(format!("a work request failed: {:?}", wc.status())),
                Ok(None) if self.peer.runtime().now() > deadline => return Err("timed out".into()),
                Ok(None) => self.idle(deadline, Some(i)),
                Err(e) => return Err(format!("polling: {e}")),
            }
        }
    }

    /// Appends `data` as the next entry: into the writer's copy of the ring, nothing posted
    /// yet (the next [`Log::sync`] writes every entry appended since the last one to each
    /// replica in one batch). The entry is durable once [`Log::sync`] returns a position above
    /// its lsn.
    ///
    /// # Errors
    /// [`LogError::EntryTooLarge`] if it can never fit the ring; [`LogError::Full`] if it does
    /// not fit before a prefix is truncated.
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
        self.rec = rec;
        written?;
        self.bounds.push_back(pos);
        self.index.push_back(pos);
        self.tail = pos + size;
        self.next_lsn += 1;
        Ok(lsn)
    }

    /// Posts replica `i`'s sync of everything appended and not posted there yet, as one batch
    /// (one doorbell): its commit word when it is due (a position whose records are durable there
    /// already, carried when the writer's durable position moved more than `commit_every` since
    /// the word was last written; unsignaled, never flushed on its own), a write of each piece of
    /// the ring's range, a flush of each piece (persistent in `FlushMode::Persistent`), the last
    /// signaled with the range's end as its context. The RC order of the connection makes the
    /// flushes execute after the writes (docs/log.md, "Writing and committing").
    fn post_sync(&mut self, i: usize) {
        let tail = self.tail;
        let broken = self.opts.rules_off();
        let s = &self.slots[i];
        if s.posted >= tail || s.health == Health::CatchingUp || s.conn.is_none() {
            return;
        }
        let from = s.posted;
        let word = if broken.commit_word_ahead { tail } else { self.durable.min(s.durable) };
        let word = (broken.commit_word_ahead || word > s.committed.saturating_add(self.commit_every)).then_some(word);
        let flushes = if broken.ack_before_flush { 0 } else { 1 };
        let total = usize::from(word.is_some()) + (1 + flushes) * self.sync_chunks(from, tail).count();
        let mut k = 0;
        while k < total {
            let take = (total - k).min(BATCH);
            if !self.room(i, take) {
                return;
            }
            if let Err(e) = self.post_sync_ops(i, (from, tail), word, k..k + take) {
                self.mark_down(i, format!("posting a sync: {e}"));
                return;
            }
            k += take;
        }
        let s = &mut self.slots[i];
        s.posted = tail;
        s.inflight += 1;
        if let Some(w) = word {
            s.committed = w;
        }
    }

    /// Posts the operations `ops` of replica `i`'s sync of the range `[from, to)` (in order:
    /// the commit word `word` if any, the writes, the flushes) as one batch.
    fn post_sync_ops(
        &self,
        i: usize,
        (from, to): (u64, u64),
        word: Option<u64>,
        ops: std::ops::Range<usize>,
    ) -> rpma::Result<()> {
        let s = &self.slots[i];
        let (Some(conn), Some(remote)) = (s.conn.as_ref(), s.remote) else { return Ok(()) };
        let broken = self.opts.rules_off();
        let ft = if broken.sync_flush_visibility { FlushType::Visibility } else { self.flush_type() };
        let quiet = CompletionFlags::ON_ERROR;
        let n = self.sync_chunks(from, to).count();
        let w = usize::from(word.is_some());
        let last = if broken.ack_before_flush { w + n - 1 } else { w + 2 * n - 1 };
        let mut b = Batch::<T, BATCH>::new(conn);
        for k in ops {
            if let (true, Some(v)) = (k < w, word) {
                b.push(conn.atomic_write(remote.at(format::COMMIT), v.to_le_bytes()).flags(quiet))?;
                continue;
            }
            let j = k - w;
            let Some((off, len)) = self.sync_chunks(from, to).nth(j % n) else { continue };
            let at = format::HEADER + off;
            if j < n {
                let op = conn.write(remote.at(at), self.ring.slice(off..off + len));
                b.push(if k == last { op.context(to) } else { op.flags(quiet) })?;
            } else {
                let op = conn.flush(remote.slice(at..at + len), ft);
                b.push(if k == last { op.context(to) } else { op.flags(quiet) })?;
            }
        }
        b.post()
    }

    /// What a sync writes and flushes of `[from, to)`: its pieces (split at the ring's end, in
    /// chunks of at most [`MAX_WR`]), the one that reaches the ring's end stopping before a pad's
    /// filler or the skip there: bytes no sync writes (each replica keeps what it held there; a
    /// repair compares records by the bytes they are made of, rule 6 of docs/log.md).
    fn sync_chunks(&self, from: u64, to: u64) -> impl Iterator<Item = (usize, usize)> {
        let cap = self.cap;
        let lap_end = (from / cap + 1) * cap;
        let mut first_end = lap_end.min(to);
        if to > lap_end {
            let k = self.bounds.partition_point(|&b| b < lap_end);
            if let Some(&b) = k.checked_sub(1).and_then(|k| self.bounds.get(k)).filter(|&&b| b >= from) {
                if lap_end - b < format::ENTRY_HEADER as u64 {
                    first_end = b;
                } else if self.index.binary_search(&b).is_err() {
                    first_end = b + format::ENTRY_HEADER as u64;
                }
            }
        }
        let first = ((from % cap) as usize, (first_end - from) as usize);
        let second = (0, to.saturating_sub(lap_end) as usize);
        chunked([first, second].into_iter().filter(|&(_, len)| len > 0), MAX_WR)
    }

    /// Makes `need` send-queue slots free on replica `i`: retires what it completed, and if that
    /// is not enough waits for everything in flight there (marking it down after the timeout: a
    /// replica that answers nothing is found so). False if it is down.
    fn room(&mut self, i: usize, need: usize) -> bool {
        let free = |s: &Slot<T>| s.conn.as_ref().map(|c| c.sq_free() as usize);
        match free(&self.slots[i]) {
            None => return false,
            Some(f) if f >= need => return true,
            Some(_) => self.poll(i),
        }
        match free(&self.slots[i]) {
            None => false,
            Some(f) if f >= need => true,
            Some(_) => {
                self.wait_idle(i);
                self.slots[i].conn.is_some()
            }
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

    /// Syncs everything appended on replica `i` and waits for it.
    fn drain(&mut self, i: usize) {
        self.post_sync(i);
        self.wait_idle(i);
    }

    /// Waits until replica `i` completed everything in flight (marking it down after the timeout).
    fn wait_idle(&mut self, i: usize) {
        let deadline = self.peer.runtime().now() + self.opts.timeout;
        while self.slots[i].conn.is_some() && self.slots[i].inflight > 0 {
            self.poll(i);
            if self.peer.runtime().now() > deadline {
                self.mark_down(i, "timed out".into());
            } else if self.slots[i].inflight > 0 {
                self.idle(deadline, Some(i));
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
        let pending = match self.begin_sync(upto)? {
            Begun::Done(lsn) => return Ok(lsn),
            Begun::Pending(p) => p,
        };
        loop {
            if let Some(r) = self.poll_sync(&pending) {
                return r;
            }
            self.idle(pending.deadline, None);
        }
    }

    /// The first half of [`Log::sync`]: checks `upto`, and posts every replica's batch unless
    /// everything up to it is durable already.
    pub(crate) fn begin_sync(&mut self, upto: Lsn) -> Result<Begun> {
        if upto >= self.next_lsn {
            return Err(LogError::NoEntry { lsn: upto, first: self.head_lsn, next: self.next_lsn });
        }
        if upto < self.durable_lsn {
            return Ok(Begun::Done(self.durable_lsn));
        }
        if self.reconnector.is_some() {
            self.take_handovers();
        }
        let (target, target_lsn) = (self.tail, self.next_lsn);
        for i in 0..self.slots.len() {
            self.post_sync(i);
        }
        let deadline = self.peer.runtime().now() + self.opts.timeout;
        Ok(Begun::Pending(PendingSync { target, target_lsn, deadline }))
    }

    /// The second half of [`Log::sync`], one look: polls the replicas with work in flight;
    /// `Some` once a quorum completed the sync (the durable position) or once it cannot (fewer
    /// replicas left than the quorum, or the deadline passed), `None` while it may.
    pub(crate) fn poll_sync(&mut self, p: &PendingSync) -> Option<Result<Lsn>> {
        let target = p.target;
        for i in 0..self.slots.len() {
            if self.slots[i].inflight > 0 {
                self.poll(i);
            }
        }
        let done = self.slots.iter().filter(|s| s.conn.is_some() && s.durable >= target).count();
        if done >= self.quorum {
            self.durable = target;
            self.durable_lsn = p.target_lsn;
            for i in 0..self.slots.len() {
                let s = &self.slots[i];
                if s.conn.is_some() && s.health != Health::CatchingUp {
                    let h = if s.durable >= target { Health::Up } else { Health::Lagging };
                    self.set_health(i, h);
                }
            }
            return Some(Ok(self.durable_lsn));
        }
        let possible = self.slots.iter().filter(|s| s.conn.is_some() && s.posted >= target).count();
        if possible < self.quorum || self.peer.runtime().now() > p.deadline {
            let reasons: Vec<Option<String>> = self
                .slots
                .iter()
                .map(|s| match (s.conn.is_some(), s.durable >= target) {
                    (false, _) => Some("down".to_owned()),
                    (true, false) => Some("sync not completed".to_owned()),
                    (true, true) => None,
                })
                .collect();
            let addrs: Vec<ReplicaAddr> = self.slots.iter().map(|s| s.addr.clone()).collect();
            return Some(Err(no_quorum(done, self.quorum, &addrs, &reasons)));
        }
        None
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
    /// reused: every replica up syncs everything appended and commits it (its commit word,
    /// persisted), then records the new head (persistently) before the space is reused.
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
            // Everything posted there is durable: the commit word takes it, persisted before the
            // new head (a commit word below the head would empty the log there).
            let word = s.durable;
            if word < new_head {
                self.mark_down(i, format!("its durable position {word} is below the new head {new_head}"));
                continue;
            }
            let quiet = CompletionFlags::ON_ERROR;
            let word_at = |at: usize| remote.slice(at..at + 8);
            let r = (|| -> rpma::Result<()> {
                let mut b = Batch::<T, BATCH>::new(conn);
                b.push(conn.atomic_write(remote.at(format::COMMIT), word.to_le_bytes()).flags(quiet))?;
                b.push(conn.flush(word_at(format::COMMIT), ft).flags(quiet))?;
                b.push(conn.atomic_write(remote.at(format::HEAD_LSN), lsn.to_le_bytes()).flags(quiet))?;
                b.push(conn.flush(word_at(format::HEAD_LSN), ft).flags(quiet))?;
                b.push(conn.atomic_write(remote.at(format::HEAD), new_head.to_le_bytes()).flags(quiet))?;
                b.push(conn.flush(word_at(format::HEAD), ft).context(4))?;
                b.post()
            })();
            let r = r.map_err(|e| e.to_string()).and_then(|()| self.wait_one(i, 4));
            match r {
                Ok(()) => self.slots[i].committed = word,
                Err(why) => self.mark_down(i, format!("recording the head: {why}")),
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
    /// entry below it is durable there (its sync's flush completed). 0 when nothing is known:
    /// for an index outside the set, or a replica whose last completed sync is below the head.
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
