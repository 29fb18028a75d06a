//! Taking the log over and recovering it (`Log::open`): reading the replicas' headers and
//! histories, choosing the history to keep, and repairing a replica to it (also what
//! `Log::reconnect` does before appending).

use super::*;

/// A replica's history as read: its head (and lsn), the next lsn after it, its end, where its
/// records start and where its entries are.
pub(super) struct History {
    pub(super) head: u64,
    pub(super) head_lsn: Lsn,
    pub(super) next: Option<Lsn>,
    pub(super) end: u64,
    pub(super) bounds: VecDeque<u64>,
    pub(super) index: VecDeque<u64>,
}

/// How much of a replica's tail a recovery reads at first: a tail is most often short (up to
/// the next commit word, an eighth of the ring, written off the critical path), and reading
/// past its end costs a transfer of bytes that are thrown away.
const TAIL_FIRST: u64 = 8 << 10;
/// How much of a replica's tail a recovery reads at a time at most (each read doubles the one
/// before, from [`TAIL_FIRST`]).
const TAIL_CHUNK: u64 = 1 << 20;

/// The most one read of a recovery or a repair carries: each read's completion is awaited
/// within the log's timeout.
const READ_PIECE: usize = 1 << 20;

/// `[from, to)` of a ring of `cap` bytes as the (ring offset, length) reads of a recovery: split
/// at the ring's end, each at most [`READ_PIECE`].
fn read_pieces(cap: u64, from: u64, to: u64) -> impl Iterator<Item = (usize, usize)> {
    chunked(pieces(cap, from, to), READ_PIECE)
}

/// A voter of a recovery: its header, and the end of its history as far as it is known (its
/// commit word; then as far as its tail goes, `scanned`; then read whole and validated, `exact`).
#[derive(Clone, Copy)]
struct Ranked {
    i: usize,
    h: format::Header,
    end: u64,
    scanned: bool,
    exact: bool,
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
        Self::open_with(peer, replicas, opts, None)
    }

    /// [`Log::open`] by a writer standing by: with `standby`'s buffers (made on `peer`) instead
    /// of its own, if they are the size of the replicas' ring (else it allocates its own, and
    /// `standby` is dropped). The takeover then neither allocates nor registers the ring twice
    /// over ([`RecoveryReport::phases`]' `buffers`).
    ///
    /// # Errors
    /// As [`Log::open`].
    pub fn open_standby(
        standby: Standby<T>,
        peer: &Peer<T>,
        replicas: &[ReplicaAddr],
        opts: LogOptions,
    ) -> Result<(Self, RecoveryReport)> {
        Self::open_with(peer, replicas, opts, Some(standby))
    }

    fn open_with(
        peer: &Peer<T>,
        replicas: &[ReplicaAddr],
        opts: LogOptions,
        standby: Option<Standby<T>>,
    ) -> Result<(Self, RecoveryReport)> {
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
        let rt = peer.runtime();
        let mut mark = rt.now();
        let mut lap = || {
            let now = rt.now();
            now.saturating_duration_since(std::mem::replace(&mut mark, now))
        };
        let mut epoch = opts
            .after_epoch
            .checked_add(1)
            .ok_or_else(|| LogError::Invalid(format!("no epoch above {}", opts.after_epoch)))?;
        let mut report = RecoveryReport::default();
        // Requests a standby made ahead serve the first round.
        let mut standby = standby;
        let mut ahead = standby.as_mut().map(|s| std::mem::take(&mut s.requests)).unwrap_or_default();
        let mut conns: Vec<Option<(Conn<T>, MrRemote, u64)>>;
        let mut reasons: Vec<Option<String>>;
        let mut round = 0;
        loop {
            round += 1;
            conns = Vec::new();
            reasons = Vec::new();
            let mut stale = None;
            // Every request is sent before any answer is awaited: the replicas fence and answer
            // at once, the takeover's connect costs one connection's time, not n.
            let hello = (epoch, writer_id, Ask::Open);
            let mut answers: Vec<Option<Connected<T>>> = replicas.iter().map(|_| None).collect();
            let mut pending = Vec::new();
            for (i, r) in replicas.iter().enumerate() {
                let sent = match ahead.iter().position(|(a, _)| a == r) {
                    Some(k) => connect::send(ahead.swap_remove(k).1, &opts, hello),
                    None => connect::request(peer, r, &opts, hello)?,
                };
                match sent {
                    Ok(conn) => pending.push((i, conn)),
                    Err(why) => answers[i] = Some(Connected::Down(why)),
                }
            }
            ahead.clear();
            for (i, answer) in connect::answers(rt, pending, replicas, &opts)? {
                answers[i] = Some(answer);
            }
            for answer in answers {
                let answer = answer.expect("every replica answered or is down");
                match answer {
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
        report.phases.connect = lap();
        let cap = cap.expect("a quorum is at least one replica");
        let Standby { ring, scratch, view, .. } = match standby.filter(|s| s.capacity() == cap) {
            Some(s) => s,
            None => Standby::new(peer, cap)?,
        };
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
                    posted: 0,
                    durable: 0,
                    committed: 0,
                    inflight: 0,
                    event: false,
                    retry_at: None,
                    backoff: opts.backoff.0,
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
            commit_every: (cap / 8).max(8),
            events: VecDeque::new(),
            rec: Vec::new(),
            view,
            reconnector: None,
        };
        report.epoch = epoch;
        report.phases.buffers = lap();
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
        report.phases.headers = lap();
        // The read quorum: histories of n - q + 1 replicas, so that they meet every quorum that
        // may have acknowledged an entry. A blank replacement (formatted after its region was
        // lost, not repaired since) does not vote. Nothing is written anywhere before the read
        // quorum is complete (docs/log.md, "Safety").
        let read_quorum = replicas.len() - quorum + 1;
        let broken = log.opts.rules_off();
        let (voters, blank): (Vec<(usize, format::Header)>, Vec<_>) =
            headers.iter().copied().partition(|(_, h)| broken.blank_replicas_vote || h.joined);
        let short = |voters: usize, report: &RecoveryReport| {
            let detail = report
                .down
                .iter()
                .chain(&report.rejected)
                .map(|(i, w)| format!("{}: {w}", replicas[*i]))
                .chain(blank.iter().map(|(i, _)| {
                    format!(
                        "{}: a blank replacement (it lost its region; a new log's replicas are formatted with \
                         Replica::format, rpma log serve --format): it votes once a writer repaired it",
                        replicas[*i]
                    )
                }))
                .collect::<Vec<_>>()
                .join("; ");
            LogError::NoQuorum {
                up: voters,
                needed: read_quorum,
                detail: format!("recovery reads {read_quorum} replicas' histories, {voters} could vote: {detail}"),
            }
        };
        if voters.len() < read_quorum && !broken.repair_before_read_quorum {
            return Err(short(voters.len(), &report));
        }
        // The history: the longest of the highest commit epoch among the voters (its committed
        // records and its tail), validated. A voter whose committed records fail validation no
        // longer votes.
        let mut ranked: Vec<Ranked> =
            voters.iter().map(|&(i, h)| Ranked { i, h, end: h.commit, scanned: false, exact: false }).collect();
        let mut source = None;
        loop {
            if ranked.len() < read_quorum && !broken.repair_before_read_quorum {
                return Err(short(ranked.len(), &report));
            }
            let Some(top) = ranked.iter().map(|r| r.h.commit_epoch).max() else { break };
            // The end of each tail of that epoch, as far as the chain from its commit word goes.
            let mut k = 0;
            while k < ranked.len() {
                let r = ranked[k];
                if r.h.commit_epoch == top && !r.scanned {
                    match log.tail_end(r.i, &r.h) {
                        Ok(end) => {
                            ranked[k].end = end;
                            ranked[k].scanned = true;
                        }
                        Err(why) => {
                            log.mark_down(r.i, why.clone());
                            report.rejected.push((r.i, why));
                            ranked.remove(k);
                            continue;
                        }
                    }
                }
                k += 1;
            }
            let Some(best) = ranked
                .iter()
                .enumerate()
                .filter(|(_, r)| r.h.commit_epoch == top)
                .max_by_key(|(k, r)| (r.end, std::cmp::Reverse(*k)))
                .map(|(k, _)| k)
            else {
                continue;
            };
            let r = ranked[best];
            if r.exact && source == Some(r.i) {
                break;
            }
            match log.load_history(r.i, &r.h) {
                Ok(()) => {
                    // Its history read whole: its end may be below the scan's (a tail whose first
                    // entry does not follow the committed ones is empty); rank it again.
                    ranked[best].end = log.tail;
                    ranked[best].exact = true;
                    source = Some(r.i);
                }
                Err(why) => {
                    log.mark_down(r.i, why.clone());
                    report.rejected.push((r.i, why));
                    ranked.remove(best);
                    source = None;
                }
            }
        }
        if source.is_none() {
            return Err(LogError::NoQuorum {
                up: 0,
                needed: open_quorum,
                detail: format!("no replica's history validates: {:?}", report.rejected),
            });
        }
        report.source = source;
        report.phases.history = lap();
        // A replica whose history could not be read or validated is down: if fewer than the open
        // needs are left, the open cannot succeed, and it writes nothing (it would install its
        // epoch on a weaker history while the better one is only out of reach).
        let up = log.slots.iter().filter(|s| s.conn.is_some()).count();
        if up < open_quorum && !broken.repair_before_read_quorum {
            let reasons: Vec<Option<String>> = (0..log.slots.len())
                .map(|i| report.down.iter().chain(&report.rejected).find(|(j, _)| *j == i).map(|(_, w)| w.clone()))
                .collect();
            return Err(no_quorum(up, open_quorum, replicas, &reasons));
        }
        // A truncation that reached a replica taken over takes effect: the highest head that is a
        // record boundary of the history where that replica's head lsn is the next entry's (the
        // lsns below it were durable, and truncated). A head of another history that only falls
        // on a record boundary of this one (its records of other sizes, a pad elsewhere) is not
        // a truncation of it.
        let top = headers
            .iter()
            .filter(|(_, h)| h.head > log.head && log.lsn_at(h.head) == Some(h.head_lsn))
            .map(|(_, h)| h.head)
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
        // The voters of the chosen history's commit epoch hold, by the argument's step 1, that
        // epoch's records as far as their scans went, the bytes the writer's ring holds there:
        // a repair keeps them without reading them again (docs/log.md, "Repair").
        let chosen = headers.iter().find(|(i, _)| Some(*i) == source).map(|(_, h)| h.commit_epoch);
        let known: Vec<(usize, u64)> =
            ranked.iter().filter(|r| r.scanned && Some(r.h.commit_epoch) == chosen).map(|r| (r.i, r.end)).collect();
        // Every replica taken over, the source first, to that history.
        let order: Vec<(usize, format::Header)> = headers
            .iter()
            .filter(|(i, _)| Some(*i) == source)
            .chain(headers.iter().filter(|(i, _)| Some(*i) != source))
            .copied()
            .collect();
        // A replica whose head is beyond the history's gets a full copy, which empties it first:
        // only once a quorum holds the history in this epoch (then no recovery prefers it while
        // it is being copied: docs/log.md, "Full copy").
        let (full, order): (Vec<_>, Vec<_>) = order.into_iter().partition(|(_, h)| h.head > log.head);
        for (i, h) in order.into_iter().chain(full) {
            if log.slots[i].conn.is_none() {
                continue;
            }
            let is_full = h.head > log.head;
            if is_full && report.repaired.len() < log.quorum {
                let why = format!(
                    "its head {} is beyond the history's {}: a full copy waits for {} replicas repaired, {} are",
                    h.head,
                    log.head,
                    log.quorum,
                    report.repaired.len()
                );
                log.mark_down(i, why.clone());
                report.down.push((i, why));
                continue;
            }
            let end = if Some(i) == source { Some(log.tail) } else { known.iter().find(|k| k.0 == i).map(|k| k.1) };
            match log.repair(i, &h, end) {
                Ok(()) => {
                    report.repaired.push(i);
                    if is_full {
                        report.full_copies.push(i);
                    }
                }
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
        report.phases.repair = lap();
        if log.opts.reconnect_in_background {
            let r = reconnector::Reconnector::spawn(peer, replicas.to_vec(), log.opts.clone(), epoch, writer_id)
                .map_err(|e| LogError::Replica(format!("starting the reconnect thread: {e}")))?;
            for (i, s) in log.slots.iter().enumerate() {
                if s.conn.is_none() {
                    r.tell(reconnector::Request::Down(i));
                }
            }
            log.reconnector = Some(r);
        }
        log.view = Vec::new();
        report.head_lsn = log.head_lsn;
        report.next_lsn = log.next_lsn;
        report.committed = log.tail;
        Ok((log, report))
    }

    pub(super) fn read_header(&mut self, i: usize) -> std::result::Result<format::Header, HeaderError> {
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

    /// Reads replica `i`'s range `[from, to)` into the ring (`into_ring`) or the scratch region,
    /// at ring offsets.
    pub(super) fn read_range(
        &mut self,
        i: usize,
        from: u64,
        to: u64,
        into_ring: bool,
    ) -> std::result::Result<(), String> {
        let (Some(conn), Some(remote)) = (self.slots[i].conn.as_ref(), self.slots[i].remote) else {
            return Err("not connected".into());
        };
        let dst = if into_ring { &self.ring } else { &self.scratch };
        // Each read is signaled: at most a batch's worth in flight at a time, each of at most
        // READ_PIECE bytes, so that the timeout bounds a wait for one piece, not the transfer of
        // a whole history (a ring of 32 MiB read at once outlasted an 8 s timeout on rxe).
        let (mut posted, mut reads) = (0, 0);
        for (off, len) in read_pieces(self.cap, from, to).take(BATCH) {
            conn.read(dst.slice(off..off + len), remote.at(format::HEADER + off))
                .context(2)
                .post()
                .map_err(|e| format!("reading its entries: {e}"))?;
            posted += len as u64;
            reads += 1;
        }
        for _ in 0..reads {
            self.wait_one(i, 2)?;
        }
        if from + posted < to {
            return self.read_range(i, from + posted, to, into_ring);
        }
        Ok(())
    }

    /// Copies `[from, to)` of the ring (`from_ring`) or the scratch region into `buf` (ring offsets).
    fn copy_out(&self, from: u64, to: u64, from_ring: bool, buf: &mut [u8]) -> std::result::Result<(), String> {
        let src = if from_ring { &self.ring } else { &self.scratch };
        for (off, len) in pieces(self.cap, from, to) {
            src.read(off, &mut buf[off..off + len]).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Reads replica `i`'s tail (header `h`) into the ring (`into_ring`) or the scratch region, in
    /// chunks as far as the chain goes (docs/log.md, "Recovery"): the records of its commit epoch
    /// from its commit word on, the first entry's lsn `first` (if known), each handed to `found`.
    /// `buf` holds the ring's bytes (ring offsets) as read. Returns the end of the tail.
    fn scan_tail(
        &mut self,
        i: usize,
        h: &format::Header,
        (first, into_ring): (Option<Lsn>, bool),
        buf: &mut [u8],
        mut found: impl FnMut(u64, Record),
    ) -> std::result::Result<u64, String> {
        if h.emptied {
            return Ok(h.commit);
        }
        let (cap, limit) = (self.cap, h.head + self.cap);
        let any_epoch = self.opts.rules_off().tail_any_epoch;
        let mut tail = format::Tail::new(h.commit, h.commit_epoch, first, limit, any_epoch);
        let mut have = h.commit;
        let mut chunk = TAIL_FIRST;
        while let Some(need) = tail.walk(buf, cap, have, &mut found) {
            let to = need.max(have.saturating_add(chunk)).min(limit);
            chunk = (chunk * 2).min(TAIL_CHUNK);
            self.read_range(i, have, to, into_ring)?;
            self.copy_out(have, to, into_ring, buf)?;
            have = to;
        }
        Ok(tail.end)
    }

    /// The end of replica `i`'s history (header `h`) as its tail says, read into the scratch
    /// region; its first entry is taken whatever its lsn (whether it follows the committed entries
    /// is checked when the history is read whole, [`Log::load_history`], which may end it there).
    pub(super) fn tail_end(&mut self, i: usize, h: &format::Header) -> std::result::Result<u64, String> {
        let first = (h.commit == h.head && h.head_lsn != 0).then_some(h.head_lsn);
        let mut buf = self.take_view();
        let end = self.scan_tail(i, h, (first, false), &mut buf, |_, _| {});
        self.view = buf;
        end
    }

    /// The ring-sized buffer scans parse in (the `view` field), made if it is not there.
    /// Its bytes are stale: a scan reads only what it copied in. Made zeroed by the allocator
    /// (pages mapped zero-filled as the scans touch them), not filled: a fill would write every
    /// page of a ring whose history may be a few of them (31 ms at 64 MiB on the mock).
    fn take_view(&mut self) -> Vec<u8> {
        let cap = self.cap as usize;
        match std::mem::take(&mut self.view) {
            buf if buf.len() == cap => buf,
            _ => vec![0; cap],
        }
    }

    /// Reads replica `i`'s history (header `h`) into the ring (`into_ring`) or the scratch
    /// region: its committed records, each validated (one that fails is the error), then its tail.
    pub(super) fn read_history(
        &mut self,
        i: usize,
        h: &format::Header,
        into_ring: bool,
    ) -> std::result::Result<History, String> {
        self.read_range(i, h.head, h.commit, into_ring)?;
        let mut ring = self.take_view();
        let y = self.parse_history(i, h, into_ring, &mut ring);
        self.view = ring;
        y
    }

    /// [`Log::read_history`] once its committed range is read: parsed in `ring`, then its tail
    /// read and parsed.
    fn parse_history(
        &mut self,
        i: usize,
        h: &format::Header,
        into_ring: bool,
        ring: &mut [u8],
    ) -> std::result::Result<History, String> {
        self.copy_out(h.head, h.commit, into_ring, ring)?;
        let mut y = History {
            head: h.head,
            head_lsn: h.head_lsn,
            next: None,
            end: h.commit,
            bounds: VecDeque::new(),
            index: VecDeque::new(),
        };
        let mut pos = h.head;
        while pos < h.commit {
            let rec = format::parse_record(ring, self.cap, pos, h.commit)?;
            if let Record::Entry { lsn, .. } = rec {
                match y.next {
                    None if lsn < h.head_lsn => {
                        // Truncated before a crash that kept the head's lsn and not the head.
                        pos += rec.size();
                        y.head = pos;
                        continue;
                    }
                    None if lsn != h.head_lsn && !(h.head_lsn == 0 && y.bounds.is_empty()) => {
                        return Err(format!("its first entry has lsn {lsn}, its head says {}", h.head_lsn));
                    }
                    Some(n) if lsn != n => return Err(format!("lsn {lsn} follows lsn {}", n - 1)),
                    _ => {}
                }
                if y.next.is_none() {
                    y.head_lsn = lsn;
                }
                y.next = Some(lsn.checked_add(1).ok_or_else(|| format!("lsn {lsn} at position {pos}"))?);
                y.index.push_back(pos);
            }
            y.bounds.push_back(pos);
            pos += rec.size();
        }
        let first = y.next.or((h.head_lsn != 0).then_some(h.head_lsn));
        y.end = self.scan_tail(i, h, (first, into_ring), ring, |p, rec| {
            if let Record::Entry { lsn, .. } = rec {
                if y.next.is_none() {
                    y.head_lsn = lsn;
                }
                y.next = Some(lsn + 1);
                y.index.push_back(p);
            }
            y.bounds.push_back(p);
        })?;
        let (head, end) = (y.head, y.end);
        y.bounds.retain(|&b| b >= head && b < end);
        Ok(y)
    }

    /// Takes replica `i`'s history into the writer's ring: its committed records, each validated
    /// (one that fails rejects the replica), then its tail.
    pub(super) fn load_history(&mut self, i: usize, h: &format::Header) -> std::result::Result<(), String> {
        let y = self.read_history(i, h, true)?;
        self.head = y.head;
        self.bounds = y.bounds;
        self.head_lsn = y.head_lsn;
        self.next_lsn = y.next.unwrap_or(y.head_lsn);
        self.index = y.index;
        self.tail = y.end;
        Ok(())
    }

    /// The start of the first of the writer's records in `[from, to)` whose bytes differ in the
    /// scratch region (replica's range, read there at ring offsets), or `to`. Only the bytes a
    /// record is made of are compared: an entry whole, a pad's header (not the filler after it,
    /// which no writer writes, so replicas hold whatever an earlier lap left there), nothing of
    /// the skip before the ring's end. A difference in a filler would lower a replica's commit
    /// below entries it holds like every other replica, acknowledged ones among them.
    pub(super) fn first_difference(&self, from: u64, to: u64) -> std::result::Result<u64, String> {
        let cap = self.cap;
        let err = |e: rpma::Error| e.to_string();
        let (mut mine, mut theirs) = ([0u8; 256], [0u8; 256]);
        for &start in self.bounds.iter().filter(|&&b| b >= from && b < to) {
            let off = (start % cap) as usize;
            let to_end = cap - off as u64;
            let raw = self.opts.rules_off().compare_pad_filler;
            let len = if to_end < format::ENTRY_HEADER as u64 {
                if raw {
                    to_end
                } else {
                    0
                }
            } else {
                let h = &mut mine[..format::ENTRY_HEADER];
                self.ring.read(off, h).map_err(err)?;
                match format::get_u32(h, 4) {
                    format::KIND_PAD if raw => to_end,
                    format::KIND_PAD => format::ENTRY_HEADER as u64,
                    _ => format::record_size(u64::from(format::get_u32(h, 0))),
                }
            };
            let len = len.min(to - start) as usize;
            let mut k = 0;
            while k < len {
                let n = (len - k).min(mine.len());
                self.ring.read(off + k, &mut mine[..n]).map_err(err)?;
                self.scratch.read(off + k, &mut theirs[..n]).map_err(err)?;
                if mine[..n] != theirs[..n] {
                    return Ok(start);
                }
                k += n;
            }
        }
        Ok(to)
    }

    /// The lsn a head at position `p` of the writer's history would have, if `p` is a record
    /// boundary there: the lsn of the first entry from `p` on (after a pad or a skip, the entry
    /// that follows it), the next lsn at the end.
    pub(super) fn lsn_at(&self, p: u64) -> Option<Lsn> {
        if p == self.tail {
            return Some(self.next_lsn);
        }
        self.bounds.binary_search(&p).ok()?;
        Some(self.head_lsn + self.index.partition_point(|&e| e < p) as u64)
    }

    /// The largest record boundary at or below `p` (the head at least).
    pub(super) fn bound_at_or_below(&self, p: u64) -> u64 {
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
}
