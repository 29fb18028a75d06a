//! Repair: a replica brought to the writer's history and epoch (docs/log.md, "Repair"), or
//! given a full copy of the writer's live range.

use super::*;

impl<T: Transport> Log<T> {
    /// Brings replica `i` (header `x`; `end`: how far its bytes are known to be the writer's
    /// history, given for the source, whose history the ring holds as read, and the replicas of
    /// its commit epoch whose tails were scanned: they are then not read again) to the writer's
    /// history `[head, tail)` and epoch: the part of its history equal to the writer's is kept
    /// (its commit word set at its end: raised over its own tail, or lowered to the first
    /// difference), then the rest rewritten, then committed, then the epoch is installed
    /// (docs/log.md, "Repair").
    ///
    /// A replica whose head is beyond the writer's (another writer truncated further there)
    /// gets a **full copy**: its commit is lowered below its head (it holds nothing), its head
    /// moved back to the writer's, the writer's whole live range written and flushed, then the
    /// commit and the epoch installed. At no point does its header claim a record not copied.
    pub(super) fn repair(&mut self, i: usize, x: &format::Header, end: Option<u64>) -> std::result::Result<(), String> {
        self.set_health(i, Health::CatchingUp);
        let full_copy = x.head > self.head;
        // Its bytes are the writer's history up to `end`: nothing to compare.
        let known = end.is_some();
        // Its history goes on beyond its commit word: its end (`end` if known), as
        // far as its records are valid, and whether a record of it starts at the writer's head.
        // Also the lsn of its first entry, if it has one.
        let (end, aligned, first) = match end {
            _ if full_copy || x.emptied => (x.commit, false, None),
            Some(e) => (e, true, None),
            None => match self.read_history(i, x, false) {
                Ok(y) => {
                    let aligned = self.head == y.end || y.bounds.binary_search(&self.head).is_ok();
                    (y.end, aligned, y.next.map(|_| y.head_lsn))
                }
                Err(_) => (x.commit, false, Some(Lsn::MAX)),
            },
        };
        // Holding nothing of the retained history (its history ends there, or lays its records
        // out otherwise: a commit word set at the writer's head would cut one of its records),
        // it is emptied at its own head first; beyond the writer's head, it is emptied (its
        // commit below its head) and copied whole.
        let reset = full_copy || !aligned || end <= self.head;
        let mut pb = self.head;
        if !reset {
            let cmp_end = end.min(self.tail);
            let p = if known {
                cmp_end
            } else {
                self.read_range(i, self.head, cmp_end, false)?;
                self.first_difference(self.head, cmp_end)?
            };
            pb = self.bound_at_or_below(p);
        }
        if !reset && pb > self.head && !self.opts.rules_off().kept_history_unflushed {
            self.flush_kept(i, pb)?;
        }
        let set_commit = if full_copy {
            // Below its head: an empty log there (whatever its commit was).
            Some(self.head)
        } else if reset {
            (x.commit > x.head).then_some(x.head)
        } else {
            // Lowered to the first difference, or raised to it over its own tail (records
            // validated now, and durable: `flush_kept`): the commit word must not stay below the
            // head it gets.
            (x.commit != pb).then_some(pb)
        };
        let ft = self.flush_type();
        let epoch = self.epoch;
        let (head, head_lsn, tail, cap) = (self.head, self.head_lsn, self.tail, self.cap);
        let slot = &self.slots[i];
        let (Some(conn), Some(remote)) = (slot.conn.as_ref(), slot.remote) else {
            return Err("not connected".into());
        };
        let quiet = CompletionFlags::ON_ERROR;
        let post = |r: rpma::Result<()>| r.map_err(|e| format!("repairing: {e}"));
        let word = |at: usize, v: u64| {
            post(conn.atomic_write(remote.at(at), v.to_le_bytes()).flags(quiet).post())?;
            post(conn.flush(remote.slice(at..at + 8), ft).flags(quiet).post())
        };
        // Emptied (reset), it must not keep its old head lsn as the next lsn of an empty history
        // (a recovery that took it would give acknowledged lsns again): its head lsn moves first,
        // which skips its entries below it, when they all are (none of its entries above it).
        let lsn_first = reset && !full_copy && x.head_lsn != head_lsn && first.map_or(true, |f| f <= head_lsn);
        if lsn_first {
            word(format::HEAD_LSN, head_lsn)?;
        }
        if let Some(to) = set_commit {
            word(format::COMMIT, to)?;
        }
        if x.head_lsn != head_lsn && !lsn_first {
            // Behind (it missed truncations) or beyond (a full copy): it holds nothing claimed
            // now, so the head may move either way.
            word(format::HEAD_LSN, head_lsn)?;
        }
        if x.head != head {
            word(format::HEAD, head)?;
        }
        let header_changed = set_commit.is_some() || x.head_lsn != head_lsn || x.head != head;
        if header_changed && pb < tail {
            // The records are rewritten only once the lowered commit and the moved head are
            // durable: an RDMA write does not wait for an earlier flush (a read) to complete.
            post(conn.flush(remote.slice(format::COMMIT..format::COMMIT + 8), ft).context(5).post())?;
            self.wait_one(i, 5)?;
        }
        let slot = &self.slots[i];
        let (Some(conn), Some(remote)) = (slot.conn.as_ref(), slot.remote) else {
            return Err("not connected".into());
        };
        for (off, len) in chunks(cap, pb, tail) {
            let at = region_off(cap, 0) + off;
            post(conn.write(remote.at(at), self.ring.slice(off..off + len)).flags(quiet).post())?;
            post(conn.flush(remote.slice(at..at + len), ft).flags(quiet).post())?;
        }
        post(conn.atomic_write(remote.at(format::COMMIT), tail.to_le_bytes()).flags(quiet).post())?;
        post(conn.flush(remote.slice(format::COMMIT..format::COMMIT + 8), ft).flags(quiet).post())?;
        post(conn.atomic_write(remote.at(format::COMMIT_EPOCH), epoch.to_le_bytes()).flags(quiet).post())?;
        if x.joined {
            post(conn.flush(remote.slice(format::COMMIT_EPOCH..format::COMMIT_EPOCH + 8), ft).context(3).post())?;
        } else {
            // A replacement votes from now on: it holds the history of a writer that recovered
            // from a read quorum, in that writer's epoch.
            post(conn.flush(remote.slice(format::COMMIT_EPOCH..format::COMMIT_EPOCH + 8), ft).flags(quiet).post())?;
            post(conn.atomic_write(remote.at(format::JOINED), 1u64.to_le_bytes()).flags(quiet).post())?;
            post(conn.flush(remote.slice(format::JOINED..format::JOINED + 8), ft).context(3).post())?;
        }
        self.wait_one(i, 3)?;
        let s = &mut self.slots[i];
        s.posted = tail;
        s.durable = tail;
        s.committed = tail;
        s.inflight = 0;
        self.set_health(i, Health::Up);
        Ok(())
    }

    /// Makes durable on replica `i` what it keeps of the history, `[head, pb)`, and its header,
    /// before any header word claims them: they were read from its memory, where the last
    /// writes of the writer it fenced may not be durable yet (a replica's fence takes that
    /// writer's connection down and persists nothing; docs/log.md, "Fencing"). Not waited for:
    /// every header word that follows is an atomic write, which executes after the flushes
    /// posted before it (the argument's step 1); the records written after it lie beyond `pb`.
    fn flush_kept(&self, i: usize, pb: u64) -> std::result::Result<(), String> {
        let ft = self.flush_type();
        let slot = &self.slots[i];
        let (Some(conn), Some(remote)) = (slot.conn.as_ref(), slot.remote) else {
            return Err("not connected".into());
        };
        let post = |r: rpma::Result<()>| r.map_err(|e| format!("flushing the history it keeps: {e}"));
        let quiet = CompletionFlags::ON_ERROR;
        for (off, len) in chunks(self.cap, self.head, pb) {
            let at = region_off(self.cap, 0) + off;
            post(conn.flush(remote.slice(at..at + len), ft).flags(quiet).post())?;
        }
        post(conn.flush(remote.slice(0..format::HEADER), ft).flags(quiet).post())
    }
}
