//! The bytes on a replica and on the wire: the region's header, the entries, the connection's
//! hello and reply (docs/log.md, "Layout"). Everything read from a peer is decoded here and
//! checked (lengths, magic numbers, checksums) before it is used.

/// The region's layout: a 256-byte header, then the entry area (a ring).
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"RPMALOG1");
/// Version 3: a replica's history goes on beyond its commit word (the tail: docs/log.md,
/// "Layout"). A version-2 writer reads only `[head, commit)` and would miss acknowledged records
/// of the tail, so the two refuse each other's regions.
pub(crate) const VERSION: u32 = 3;
/// Static block: magic, version, log id, capacity, checksum (offsets 0..64), written once, at
/// format.
pub(crate) const STATIC_SUM: usize = 56;
/// The promise, written by the replica only, each an 8-byte word on its own (a power cut keeps
/// each word old or new, never a mix: no checksum spans them): the promised epoch and the id of
/// the writer it was promised to.
pub(crate) const PROMISED: usize = 64;
pub(crate) const PROMISED_ID: usize = 72;
/// Where a version-1 region kept its epoch block's checksum (a 64-byte block that a power cut
/// could tear: `Broken::epoch_block_checksum` writes it again, for the simulator).
pub(crate) const EPOCH_SUM: usize = 120;
/// The writer's words, each written by an 8-byte atomic write.
pub(crate) const COMMIT_EPOCH: usize = 128;
pub(crate) const HEAD: usize = 136;
pub(crate) const COMMIT: usize = 144;
pub(crate) const HEAD_LSN: usize = 152;
/// Whether the replica votes: 1 once it holds a history a writer gave it (a replica of a new
/// log is formatted so), 0 for a replacement formatted after its region was lost, until a
/// writer that recovered from a read quorum repairs it (docs/log.md, "Amnesia").
pub(crate) const JOINED: usize = 160;
/// Where the entry area starts.
pub(crate) const HEADER: usize = 256;
/// The largest position a header may hold (a log of 4 EiB written; far from overflowing).
pub(crate) const MAX_POSITION: u64 = 1 << 62;
/// The smallest entry area.
pub(crate) const MIN_CAPACITY: u64 = 256;

/// The ring a region of `len` bytes holds: all of it after the header, rounded down to 8 bytes;
/// `None` if that is less than [`MIN_CAPACITY`].
pub(crate) const fn ring_capacity(len: u64) -> Option<u64> {
    let capacity = len.saturating_sub(HEADER as u64) & !7;
    if capacity < MIN_CAPACITY {
        None
    } else {
        Some(capacity)
    }
}

/// An entry's header: payload length, kind, lsn, epoch, position, checksum.
pub(crate) const ENTRY_HEADER: usize = 40;
pub(crate) const KIND_ENTRY: u32 = 1;
pub(crate) const KIND_PAD: u32 = 2;

/// The connection's private data.
pub(crate) const HELLO_MAGIC: u64 = u64::from_le_bytes(*b"RPMALOGH");
pub(crate) const REPLY_MAGIC: u64 = u64::from_le_bytes(*b"RPMALOGR");
pub(crate) const HELLO_LEN: usize = 48;
pub(crate) const REPLY_FIXED: usize = 48;

/// A 64-bit checksum of `parts` (not cryptographic: it finds torn and stale bytes, not an
/// adversary's). Words of 8 bytes mixed by multiply and rotate, the length folded in, a final
/// avalanche; seeded so that zeroes do not sum to zero.
pub(crate) fn checksum(parts: &[&[u8]]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h: u64 = 0x243F_6A88_85A3_08D3;
    let mut total = 0u64;
    for part in parts {
        total = total.wrapping_add(part.len() as u64);
        let mut chunks = part.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
            h = (h ^ w).wrapping_mul(K).rotate_left(29);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            h = (h ^ u64::from_le_bytes(w) ^ 0xFF).wrapping_mul(K).rotate_left(29);
        }
    }
    h ^= total;
    h ^= h >> 33;
    h = h.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    h ^= h >> 33;
    h
}

pub(crate) fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

pub(crate) fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// The bytes of a region's static block for `log_id` and `capacity`.
pub(crate) fn static_block(log_id: u64, capacity: u64) -> [u8; 64] {
    let mut b = [0u8; 64];
    put_u64(&mut b, 0, MAGIC);
    b[8..12].copy_from_slice(&VERSION.to_le_bytes());
    put_u64(&mut b, 16, log_id);
    put_u64(&mut b, 24, capacity);
    let sum = checksum(&[&b[..STATIC_SUM]]);
    put_u64(&mut b, STATIC_SUM, sum);
    b
}

/// The epoch block of a version-1 region (promise, writer id, checksum, in one 64-byte block):
/// what `Broken::epoch_block_checksum` writes.
pub(crate) fn epoch_block(promised: u64, writer: u64) -> [u8; 64] {
    let mut b = [0u8; 64];
    put_u64(&mut b, 0, promised);
    put_u64(&mut b, 8, writer);
    let sum = checksum(&[&b[..EPOCH_SUM - PROMISED]]);
    put_u64(&mut b, EPOCH_SUM - PROMISED, sum);
    b
}

/// A region's header, decoded and checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) log_id: u64,
    pub(crate) capacity: u64,
    pub(crate) promised: u64,
    pub(crate) promised_id: u64,
    pub(crate) commit_epoch: u64,
    pub(crate) head: u64,
    pub(crate) commit: u64,
    pub(crate) head_lsn: u64,
    /// It votes ([`JOINED`]).
    pub(crate) joined: bool,
    /// The commit word is below the head: an empty log at the head, with no tail (a repair
    /// passes through that state; `commit` is then the head).
    pub(crate) emptied: bool,
}

/// Decodes the first [`HEADER`] bytes of a region of `region_len` bytes.
pub(crate) fn decode_header(b: &[u8], region_len: u64) -> Result<Header, String> {
    if b.len() < HEADER {
        return Err(format!("the header needs {HEADER} bytes, {} were read", b.len()));
    }
    if get_u64(b, 0) != MAGIC {
        return Err("no rpma-log header (bad magic number)".into());
    }
    if checksum(&[&b[..STATIC_SUM]]) != get_u64(b, STATIC_SUM) {
        return Err("the header's static block fails its checksum".into());
    }
    let version = get_u32(b, 8);
    if version == 2 {
        return Err(format!(
            "header version 2, an older rpma-log's region: its writers commit every record, this build's leave \
             acknowledged records beyond the commit word (the tail), which a version-2 writer would not read; \
             serve it with the build that made it, or format it anew (this build reads version {VERSION})"
        ));
    }
    if version != VERSION {
        return Err(format!("header version {version}, this build reads {VERSION}"));
    }
    let capacity = get_u64(b, 24);
    if capacity < MIN_CAPACITY || capacity % 8 != 0 {
        return Err(format!("capacity {capacity} is not a multiple of 8 of at least {MIN_CAPACITY}"));
    }
    if (HEADER as u64).checked_add(capacity).map_or(true, |end| end > region_len) {
        return Err(format!("capacity {capacity} does not fit the region of {region_len} bytes"));
    }
    #[cfg(feature = "testing")]
    if get_u64(b, EPOCH_SUM) != 0 && checksum(&[&b[PROMISED..EPOCH_SUM]]) != get_u64(b, EPOCH_SUM) {
        return Err("the header's epoch block fails its checksum".into());
    }
    let h = Header {
        log_id: get_u64(b, 16),
        capacity,
        promised: get_u64(b, PROMISED),
        promised_id: get_u64(b, PROMISED_ID),
        commit_epoch: get_u64(b, COMMIT_EPOCH),
        head: get_u64(b, HEAD),
        commit: get_u64(b, COMMIT),
        head_lsn: get_u64(b, HEAD_LSN),
        joined: match get_u64(b, JOINED) {
            0 => false,
            1 => true,
            j => return Err(format!("the joined word holds {j}, not 0 or 1")),
        },
        emptied: false,
    };
    // A commit below the head is an empty log at the head (a repair moves a replica that holds
    // nothing of the retained history there: docs/log.md, "Repair").
    let mut h = h;
    h.emptied = h.commit < h.head;
    h.commit = h.commit.max(h.head);
    if h.commit > MAX_POSITION {
        return Err(format!("commit position {} is beyond the largest position {MAX_POSITION}", h.commit));
    }
    if h.commit - h.head > capacity {
        return Err(format!("head {} and commit {} are not a range of at most {capacity} bytes", h.head, h.commit));
    }
    if h.commit_epoch > h.promised {
        return Err(format!("commit epoch {} is above the promised epoch {}", h.commit_epoch, h.promised));
    }
    Ok(h)
}

/// The header of an entry (or pad) at absolute position `pos`.
pub(crate) fn entry_header(kind: u32, len: u32, lsn: u64, epoch: u64, pos: u64, payload: &[u8]) -> [u8; ENTRY_HEADER] {
    let mut h = [0u8; ENTRY_HEADER];
    h[0..4].copy_from_slice(&len.to_le_bytes());
    h[4..8].copy_from_slice(&kind.to_le_bytes());
    put_u64(&mut h, 8, lsn);
    put_u64(&mut h, 16, epoch);
    put_u64(&mut h, 24, pos);
    let sum = checksum(&[&h[..32], payload]);
    put_u64(&mut h, 32, sum);
    h
}

/// The bytes a record of `len` payload bytes takes (header, payload, padding to 8).
pub(crate) const fn record_size(len: u64) -> u64 {
    (ENTRY_HEADER as u64 + len + 7) & !7
}

/// What parsing found at a position of the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Record {
    /// Fewer than an entry header's bytes before the ring's end: skipped.
    Skip(u64),
    /// A pad to the ring's end.
    Pad(u64),
    /// An entry: its lsn, epoch, payload length, and its record size.
    Entry { lsn: u64, epoch: u64, len: u64, size: u64 },
}

impl Record {
    pub(crate) const fn size(self) -> u64 {
        match self {
            Self::Skip(n) | Self::Pad(n) => n,
            Self::Entry { size, .. } => size,
        }
    }
}

/// Parses the record at absolute position `pos` of a ring of `cap` bytes held in `ring`
/// (`ring[i]` is ring offset `i`), checking it against its checksum and position. The record
/// must end at or before `end`.
pub(crate) fn parse_record(ring: &[u8], cap: u64, pos: u64, end: u64) -> Result<Record, String> {
    let off = (pos % cap) as usize;
    let to_end = cap - off as u64;
    if to_end < ENTRY_HEADER as u64 {
        if pos.saturating_add(to_end) > end {
            return Err(format!("the skip at position {pos} runs past the end {end}"));
        }
        return Ok(Record::Skip(to_end));
    }
    let h = &ring[off..off + ENTRY_HEADER];
    let len = u64::from(get_u32(h, 0));
    let kind = get_u32(h, 4);
    let lsn = get_u64(h, 8);
    let epoch = get_u64(h, 16);
    let at = get_u64(h, 24);
    if at != pos {
        return Err(format!("the record at position {pos} says it is at {at} (stale or torn)"));
    }
    match kind {
        KIND_PAD => {
            if len + ENTRY_HEADER as u64 != to_end {
                return Err(format!("the pad at position {pos} does not reach the ring's end"));
            }
            if checksum(&[&h[..32], &[]]) != get_u64(h, 32) {
                return Err(format!("the pad at position {pos} fails its checksum"));
            }
            if pos.saturating_add(to_end) > end {
                return Err(format!("the pad at position {pos} runs past the end {end}"));
            }
            Ok(Record::Pad(to_end))
        }
        KIND_ENTRY => {
            let size = record_size(len);
            if size > to_end || pos.saturating_add(size) > end {
                return Err(format!("the entry at position {pos} of {len} bytes runs past its bounds"));
            }
            let payload = &ring[off + ENTRY_HEADER..off + ENTRY_HEADER + len as usize];
            if checksum(&[&h[..32], payload]) != get_u64(h, 32) {
                return Err(format!("the entry at position {pos} (lsn {lsn}) fails its checksum"));
            }
            Ok(Record::Entry { lsn, epoch, len, size })
        }
        k => Err(format!("the record at position {pos} has an unknown kind {k}")),
    }
}

/// A replica's tail being walked (docs/log.md, "Recovery"): the chain of records from its commit
/// word on, each valid (checksum, its position where it lies, kind, bounds), of the replica's
/// commit epoch, its entries' lsns consecutive with the one before; the chain ends at the first
/// record that fails any of these (a torn or stale record ends it, nothing is rejected) and never
/// runs past `limit` (the head plus the capacity).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tail {
    /// The next position to look at.
    pub(crate) pos: u64,
    /// The end of the last entry of the chain (where it began, if it holds none): the end of
    /// the replica's history. A pad or skip after it is not part of it.
    pub(crate) end: u64,
    /// The lsn the next entry must have (`None`: any, for the first one).
    pub(crate) next: Option<u64>,
    epoch: u64,
    limit: u64,
    any_epoch: bool,
    ended: bool,
}

impl Tail {
    /// A tail from `from` (the commit word) of a replica of commit epoch `epoch`, its first entry
    /// `next` (if known), bounded by `limit`. `any_epoch`: `Broken::tail_any_epoch`.
    pub(crate) const fn new(from: u64, epoch: u64, next: Option<u64>, limit: u64, any_epoch: bool) -> Self {
        Self { pos: from, end: from, next, epoch, limit, any_epoch, ended: false }
    }

    /// Walks the chain over `ring` (ring offsets of a ring of `cap` bytes), whose bytes are valid
    /// up to position `have`, calling `f(position, record)` for each record of the chain. Returns
    /// `None` once the chain ended, `Some(p)` when it needs the bytes up to position `p` to go on.
    pub(crate) fn walk(&mut self, ring: &[u8], cap: u64, have: u64, mut f: impl FnMut(u64, Record)) -> Option<u64> {
        while !self.ended {
            match self.step(ring, cap, have) {
                Step::Need(p) => return Some(p),
                Step::End => self.ended = true,
                Step::Record(r) => {
                    f(self.pos, r);
                    self.pos += r.size();
                    if let Record::Entry { lsn, .. } = r {
                        self.end = self.pos;
                        self.next = Some(lsn + 1);
                    }
                }
            }
        }
        None
    }

    fn step(&self, ring: &[u8], cap: u64, have: u64) -> Step {
        let pos = self.pos;
        if pos >= self.limit {
            return Step::End;
        }
        let off = (pos % cap) as usize;
        let to_end = cap - off as u64;
        if to_end < ENTRY_HEADER as u64 {
            return if pos.saturating_add(to_end) > self.limit {
                Step::End
            } else {
                Step::Record(Record::Skip(to_end))
            };
        }
        let header_end = pos.saturating_add(ENTRY_HEADER as u64);
        if header_end > self.limit {
            return Step::End;
        }
        if header_end > have {
            return Step::Need(header_end);
        }
        let h = &ring[off..off + ENTRY_HEADER];
        let size = match get_u32(h, 4) {
            KIND_PAD => to_end,
            KIND_ENTRY => record_size(u64::from(get_u32(h, 0))),
            _ => return Step::End,
        };
        let end = pos.saturating_add(size);
        if size > to_end || end > self.limit {
            return Step::End;
        }
        if end > have {
            return Step::Need(end);
        }
        if !self.any_epoch && get_u64(h, 16) != self.epoch {
            return Step::End;
        }
        match parse_record(ring, cap, pos, self.limit) {
            Ok(Record::Entry { lsn, .. }) if self.next.is_some_and(|n| n != lsn) || lsn == u64::MAX => Step::End,
            Ok(r) => Step::Record(r),
            Err(_) => Step::End,
        }
    }
}

/// What the tail holds at a position.
enum Step {
    Record(Record),
    End,
    Need(u64),
}

/// What a writer asks of a replica in its hello.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ask {
    /// A new writer's takeover (`Log::open`): accepted only with an epoch above every one the
    /// replica promised, whatever the writer id.
    Open,
    /// A writer coming back to a replica it took over (`Log::reconnect`, the reconnect thread):
    /// accepted only if the replica's promise is still this epoch to this writer id.
    Reconnect,
}

/// A writer's hello (connection private data).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) log_id: u64,
    pub(crate) epoch: u64,
    pub(crate) writer: u64,
    pub(crate) ask: Ask,
}

const ASK_OPEN: u64 = 1;
const ASK_RECONNECT: u64 = 2;

pub(crate) fn encode_hello(h: Hello) -> [u8; HELLO_LEN] {
    let mut b = [0u8; HELLO_LEN];
    put_u64(&mut b, 0, HELLO_MAGIC);
    put_u64(&mut b, 8, h.log_id);
    put_u64(&mut b, 16, h.epoch);
    put_u64(&mut b, 24, h.writer);
    put_u64(&mut b, 32, if h.ask == Ask::Open { ASK_OPEN } else { ASK_RECONNECT });
    let sum = checksum(&[&b[..40]]);
    put_u64(&mut b, 40, sum);
    b
}

pub(crate) fn decode_hello(b: &[u8]) -> Option<Hello> {
    if b.len() < HELLO_LEN || get_u64(b, 0) != HELLO_MAGIC || checksum(&[&b[..40]]) != get_u64(b, 40) {
        return None;
    }
    let ask = match get_u64(b, 32) {
        ASK_OPEN => Ask::Open,
        ASK_RECONNECT => Ask::Reconnect,
        _ => return None,
    };
    Some(Hello { log_id: get_u64(b, 8), epoch: get_u64(b, 16), writer: get_u64(b, 24), ask })
}

/// What a replica answers a hello with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Status {
    Accepted = 0,
    StaleEpoch = 1,
    WrongLogId = 2,
    BadHello = 3,
    Failed = 4,
}

/// A replica's reply: status, its log id, its promised epoch, its capacity, then (accepted)
/// the region's descriptor and the peer configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reply {
    pub(crate) status: u32,
    pub(crate) log_id: u64,
    pub(crate) promised: u64,
    pub(crate) capacity: u64,
    pub(crate) rest: Vec<u8>,
}

pub(crate) fn encode_reply(status: Status, log_id: u64, promised: u64, capacity: u64, rest: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; REPLY_FIXED];
    put_u64(&mut b, 0, REPLY_MAGIC);
    b[8..12].copy_from_slice(&(status as u32).to_le_bytes());
    put_u64(&mut b, 16, log_id);
    put_u64(&mut b, 24, promised);
    put_u64(&mut b, 32, capacity);
    b.extend_from_slice(rest);
    let sum = checksum(&[&b[..40], &b[REPLY_FIXED..]]);
    put_u64(&mut b, 40, sum);
    b
}

pub(crate) fn decode_reply(b: &[u8]) -> Option<Reply> {
    if b.len() < REPLY_FIXED || get_u64(b, 0) != REPLY_MAGIC {
        return None;
    }
    // Transports may pad private data with zeroes: the checksum covers the fixed part and the
    // bytes the status says follow.
    let status = get_u32(b, 8);
    let rest_len = if status == Status::Accepted as u32 {
        rpma::MrRemote::DESCRIPTOR_SIZE + rpma::PeerCfg::DESCRIPTOR_SIZE
    } else {
        0
    };
    let rest = b.get(REPLY_FIXED..REPLY_FIXED + rest_len)?;
    if checksum(&[&b[..40], rest]) != get_u64(b, 40) {
        return None;
    }
    Some(Reply {
        status,
        log_id: get_u64(b, 16),
        promised: get_u64(b, 24),
        capacity: get_u64(b, 32),
        rest: rest.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header of log `log_id` with a ring of `cap` bytes, promised `promised` to `writer`.
    fn header(log_id: u64, cap: u64, promised: u64, writer: u64) -> Vec<u8> {
        let mut b = vec![0u8; HEADER];
        b[..64].copy_from_slice(&static_block(log_id, cap));
        put_u64(&mut b, PROMISED, promised);
        put_u64(&mut b, PROMISED_ID, writer);
        b
    }

    #[test]
    fn a_header_with_a_flipped_byte_in_its_static_block_is_refused() {
        let b = header(7, 1024, 3, 9);
        let h = decode_header(&b, 2048).expect("valid");
        assert_eq!((h.log_id, h.capacity, h.promised, h.promised_id), (7, 1024, 3, 9));
        for i in 0..56 {
            let mut c = b.clone();
            c[i] ^= 0x10;
            assert!(decode_header(&c, 2048).is_err(), "byte {i} flipped passed");
        }
        assert!(decode_header(&b, 1024).is_err(), "capacity beyond the region passed");
    }

    /// The headers a power cut may leave in the middle of a promise's update from `old` to
    /// `new`: each 8-byte word of the epoch area (64..128) old or new, independently (what x86
    /// persistent memory promises).
    fn torn_mixes(old: &[u8], new: &[u8]) -> Vec<Vec<u8>> {
        let words: Vec<usize> =
            (PROMISED..COMMIT_EPOCH).step_by(8).filter(|&w| old[w..w + 8] != new[w..w + 8]).collect();
        (0..1u32 << words.len())
            .map(|mask| {
                let mut b = old.to_vec();
                for (k, &w) in words.iter().enumerate() {
                    if mask & (1 << k) != 0 {
                        b[w..w + 8].copy_from_slice(&new[w..w + 8]);
                    }
                }
                b
            })
            .collect()
    }

    #[test]
    fn every_header_a_power_cut_leaves_in_a_promise_update_is_valid_and_promises_no_less() {
        let old = header(7, 1024, 3, 9);
        let new = header(7, 1024, 5, 11);
        for b in torn_mixes(&old, &new) {
            let h = decode_header(&b, 2048).expect("a torn promise update");
            assert!(h.promised == 3 || h.promised == 5, "promised {}", h.promised);
        }
        // The version-1 block, with a checksum across its words, is refused in the middle.
        let block = |p, w| {
            let mut b = header(7, 1024, 0, 0);
            b[PROMISED..COMMIT_EPOCH].copy_from_slice(&epoch_block(p, w));
            b
        };
        let (old, new) = (block(3, 9), block(5, 11));
        let torn = torn_mixes(&old, &new)
            .into_iter()
            .filter(|b| checksum(&[&b[PROMISED..EPOCH_SUM]]) != get_u64(b, EPOCH_SUM));
        assert!(torn.count() > 0, "no mix of the version-1 block fails its checksum");
    }

    #[test]
    fn header_positions_are_checked_and_a_commit_below_the_head_is_empty() {
        let mut b = header(7, 1024, 3, 9);
        let set = |b: &mut Vec<u8>, at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        set(&mut b, HEAD, 4096);
        set(&mut b, COMMIT, 1000);
        let h = decode_header(&b, 2048).expect("empty at the head");
        assert_eq!((h.head, h.commit, h.emptied), (4096, 4096, true), "no tail below the head");
        set(&mut b, COMMIT, 4096);
        assert!(!decode_header(&b, 2048).expect("at the head").emptied, "a tail from the head");
        set(&mut b, COMMIT, 1000);
        set(&mut b, COMMIT, 4096 + 1025);
        assert!(decode_header(&b, 2048).is_err(), "a range longer than the ring passed");
        set(&mut b, HEAD, u64::MAX - 8);
        set(&mut b, COMMIT, u64::MAX);
        assert!(decode_header(&b, 2048).is_err(), "a position near the end of u64 passed");
        set(&mut b, HEAD, 0);
        set(&mut b, COMMIT, 0);
        set(&mut b, COMMIT_EPOCH, 4);
        assert!(decode_header(&b, 2048).is_err(), "a commit epoch above the promised one passed");
        // Records at the end of the position space do not overflow.
        let ring = vec![0u8; 1024];
        assert!(parse_record(&ring, 1024, u64::MAX - 100, u64::MAX).is_err());
    }

    #[test]
    fn an_entry_parses_back_and_a_torn_one_does_not() {
        let cap = 512u64;
        let mut ring = vec![0u8; cap as usize];
        let payload = b"hello log";
        let h = entry_header(KIND_ENTRY, payload.len() as u32, 5, 2, 1024 + 64, payload);
        ring[64..104].copy_from_slice(&h);
        ring[104..104 + payload.len()].copy_from_slice(payload);
        let r = parse_record(&ring, cap, 1024 + 64, 1024 + 512).expect("valid");
        assert_eq!(r, Record::Entry { lsn: 5, epoch: 2, len: 9, size: record_size(9) });
        // The same bytes at another lap are stale.
        assert!(parse_record(&ring, cap, 64, 512).is_err());
        ring[110] ^= 1;
        assert!(parse_record(&ring, cap, 1024 + 64, 1024 + 512).is_err());
    }

    #[test]
    fn a_version_2_region_is_refused_saying_why() {
        let mut b = header(7, 1024, 3, 9);
        b[8..12].copy_from_slice(&2u32.to_le_bytes());
        let sum = checksum(&[&b[..STATIC_SUM]]);
        b[STATIC_SUM..STATIC_SUM + 8].copy_from_slice(&sum.to_le_bytes());
        let e = decode_header(&b, 2048).expect_err("a version-2 header passed");
        assert!(e.contains("header version 2") && e.contains("tail"), "{e}");
        b[8..12].copy_from_slice(&4u32.to_le_bytes());
        let sum = checksum(&[&b[..STATIC_SUM]]);
        b[STATIC_SUM..STATIC_SUM + 8].copy_from_slice(&sum.to_le_bytes());
        assert!(decode_header(&b, 2048).expect_err("version 4 passed").contains("this build reads 3"));
    }

    /// Writes an entry (`lsn`, `epoch`, a payload of `len` bytes) at position `pos` of `ring`;
    /// returns the position after it.
    fn put(ring: &mut [u8], pos: u64, lsn: u64, epoch: u64, len: usize) -> u64 {
        let cap = ring.len() as u64;
        let off = (pos % cap) as usize;
        let payload = vec![lsn as u8; len];
        ring[off..off + ENTRY_HEADER].copy_from_slice(&entry_header(KIND_ENTRY, len as u32, lsn, epoch, pos, &payload));
        ring[off + ENTRY_HEADER..off + ENTRY_HEADER + len].copy_from_slice(&payload);
        pos + record_size(len as u64)
    }

    /// The tail from `from` over `ring` (all of it read): its end and its entries' lsns.
    fn walk(ring: &[u8], from: u64, epoch: u64, next: Option<u64>, limit: u64) -> (u64, Vec<u64>) {
        let mut t = Tail::new(from, epoch, next, limit, false);
        let mut lsns = Vec::new();
        let need = t.walk(ring, ring.len() as u64, u64::MAX, |_, r| {
            if let Record::Entry { lsn, .. } = r {
                lsns.push(lsn);
            }
        });
        assert_eq!(need, None);
        (t.end, lsns)
    }

    #[test]
    fn a_tail_is_the_chain_of_its_epochs_records_from_the_commit_word() {
        let cap = 512u64;
        let mut ring = vec![0u8; cap as usize];
        let mut ends = vec![0u64];
        for lsn in 0..5 {
            let p = put(&mut ring, *ends.last().unwrap(), lsn, 2, 20);
            ends.push(p);
        }
        // From the commit word (after lsn 1), as far as the records of epoch 2 go.
        assert_eq!(walk(&ring, ends[2], 2, Some(2), cap), (ends[5], vec![2, 3, 4]));
        // The first entry must be the one that follows the committed ones.
        assert_eq!(walk(&ring, ends[2], 2, Some(7), cap), (ends[2], vec![]));
        // A record of another epoch ends it (a fenced writer's, beyond the history installed).
        put(&mut ring, ends[5], 5, 1, 20);
        assert_eq!(walk(&ring, ends[2], 2, Some(2), cap).0, ends[5]);
        // So does a gap in the lsns, and a torn record; the records after it do not count.
        let after = put(&mut ring, ends[5], 7, 2, 20);
        put(&mut ring, after, 8, 2, 20);
        assert_eq!(walk(&ring, ends[2], 2, Some(2), cap).0, ends[5]);
        ring[(ends[3] + 45) as usize] ^= 1;
        assert_eq!(walk(&ring, ends[2], 2, Some(2), cap), (ends[3], vec![2]));
        // Never past the limit (head + capacity).
        assert_eq!(walk(&ring, ends[0], 2, Some(0), ends[2] + 8).0, ends[2]);
        // A stale record of an earlier lap fails its position.
        assert_eq!(walk(&ring, ends[0] + cap, 2, None, 2 * cap).0, ends[0] + cap);
    }

    #[test]
    fn a_tail_goes_on_over_a_pad_and_a_skip_and_ends_after_an_entry() {
        let cap = 256u64;
        let limit = 48 + cap;
        let mut ring = vec![0u8; cap as usize];
        // An entry up to 24 bytes before the ring's end (a skip), then the next lap.
        assert_eq!(put(&mut ring, 48, 0, 3, 144), cap - 24);
        let next = put(&mut ring, cap, 1, 3, 8);
        assert_eq!(walk(&ring, 48, 3, Some(0), limit), (next, vec![0, 1]));
        // A pad to the ring's end, then nothing valid after it: the tail ends before the pad.
        let mut ring = vec![0u8; cap as usize];
        let p = put(&mut ring, 48, 0, 3, 100);
        let pad = entry_header(KIND_PAD, (cap - p - ENTRY_HEADER as u64) as u32, 1, 3, p, &[]);
        ring[p as usize..p as usize + ENTRY_HEADER].copy_from_slice(&pad);
        assert_eq!(walk(&ring, 48, 3, Some(0), limit), (p, vec![0]));
        assert_eq!(walk(&ring, 48, 3, Some(0), limit), (p, vec![0]));
        let next = put(&mut ring, cap, 1, 3, 8);
        assert_eq!(walk(&ring, 48, 3, Some(0), limit), (next, vec![0, 1]));
        // A pad of another epoch ends it too.
        let pad = entry_header(KIND_PAD, (cap - p - ENTRY_HEADER as u64) as u32, 1, 2, p, &[]);
        ring[p as usize..p as usize + ENTRY_HEADER].copy_from_slice(&pad);
        assert_eq!(walk(&ring, 48, 3, Some(0), limit), (p, vec![0]));
        // Bytes not read yet: it asks for them.
        let mut t = Tail::new(48, 3, Some(0), limit, false);
        assert_eq!(t.walk(&ring, cap, 60, |_, _| {}), Some(48 + ENTRY_HEADER as u64));
        assert_eq!(t.walk(&ring, cap, 100, |_, _| {}), Some(p));
    }

    #[test]
    fn hello_and_reply_round_trip_and_refuse_garbage() {
        for ask in [Ask::Open, Ask::Reconnect] {
            let h = Hello { log_id: 1, epoch: 2, writer: 3, ask };
            assert_eq!(decode_hello(&encode_hello(h)), Some(h));
        }
        let h = Hello { log_id: 1, epoch: 2, writer: 3, ask: Ask::Open };
        let mut bad = encode_hello(h);
        bad[17] ^= 1;
        assert_eq!(decode_hello(&bad), None);
        let mut unknown = encode_hello(h);
        unknown[32] = 9;
        let sum = checksum(&[&unknown[..40]]);
        unknown[40..48].copy_from_slice(&sum.to_le_bytes());
        assert_eq!(decode_hello(&unknown), None, "an unknown request kind passed");
        assert_eq!(decode_hello(&bad[..10]), None);
        let rest = vec![7u8; rpma::MrRemote::DESCRIPTOR_SIZE + rpma::PeerCfg::DESCRIPTOR_SIZE];
        let r = encode_reply(Status::Accepted, 1, 2, 4096, &rest);
        let mut padded = r.clone();
        padded.extend_from_slice(&[0; 20]);
        let d = decode_reply(&padded).expect("valid");
        assert_eq!((d.status, d.promised, d.capacity, d.rest), (0, 2, 4096, rest));
        let mut bad = r;
        bad[30] ^= 1;
        assert!(decode_reply(&bad).is_none());
    }
}
