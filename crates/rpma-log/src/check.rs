//! An offline check of a replica region's bytes: what a recovery would find there.

use crate::error::{LogError, Lsn, Result};
use crate::format::{self, Record, Tail};

/// What a replica region holds, checked ([`check_region`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RegionCheck {
    /// The log's id.
    pub log_id: u64,
    /// The ring's bytes.
    pub capacity: u64,
    /// The highest epoch a writer took the log over with.
    pub promised: u64,
    /// The epoch of the writer that last installed its history.
    pub commit_epoch: u64,
    /// The first lsn held.
    pub head_lsn: Lsn,
    /// One past the last entry below the commit word (the committed part of the history).
    pub committed_lsn: Lsn,
    /// One past the last entry of the history: the committed part and the tail.
    pub next_lsn: Lsn,
    /// The history's entries, in order: (lsn, payload).
    pub entries: Vec<(Lsn, Vec<u8>)>,
}

/// Checks the bytes of a replica region (e.g. what a power cut left, or a pmem file) as a
/// recovery reads them: the header (magic number, version, checksums, positions), then every
/// committed record (checksum, position, consecutive lsns), then the tail beyond the commit word
/// (the chain of valid records of the region's commit epoch with consecutive lsns, ending at the
/// first that is not one: docs/log.md, "Recovery"). The history is both.
///
/// # Errors
/// [`LogError::CorruptHeader`] if the header fails its checks; [`LogError::CorruptEntries`]
/// with the first committed record that fails its check.
pub fn check_region(bytes: &[u8]) -> Result<RegionCheck> {
    let corrupt = |detail: String| LogError::CorruptHeader { replica: "region".into(), detail };
    let h = format::decode_header(bytes, bytes.len() as u64).map_err(corrupt)?;
    let corrupt = |detail: String| LogError::CorruptEntries { replica: "region".into(), detail };
    let cap = h.capacity;
    let ring = &bytes[format::HEADER..format::HEADER + cap as usize];
    let payload = |pos: u64, len: u64| {
        let off = (pos % cap) as usize + format::ENTRY_HEADER;
        ring[off..off + len as usize].to_vec()
    };
    let mut pos = h.head;
    let mut entries = Vec::new();
    let mut next: Option<Lsn> = None;
    while pos < h.commit {
        let rec = format::parse_record(ring, cap, pos, h.commit).map_err(corrupt)?;
        if let Record::Entry { lsn, len, .. } = rec {
            if next.is_none() && lsn < h.head_lsn {
                pos += rec.size();
                continue;
            }
            if let Some(n) = next {
                if lsn != n {
                    return Err(corrupt(format!("lsn {lsn} follows lsn {}", n - 1)));
                }
            } else if lsn != h.head_lsn && h.head_lsn != 0 {
                return Err(corrupt(format!("the first entry has lsn {lsn}, the head says {}", h.head_lsn)));
            }
            next = Some(lsn.checked_add(1).ok_or_else(|| corrupt(format!("lsn {lsn} at position {pos}")))?);
            entries.push((lsn, payload(pos, len)));
        }
        pos += rec.size();
    }
    let committed = entries.len();
    if !h.emptied {
        let first = next.or((h.head_lsn != 0).then_some(h.head_lsn));
        let mut tail = Tail::new(h.commit, h.commit_epoch, first, h.head + cap, false);
        let all = h.head + cap;
        tail.walk(ring, cap, all, |pos, rec| {
            if let Record::Entry { lsn, len, .. } = rec {
                entries.push((lsn, payload(pos, len)));
            }
        });
    }
    let head_lsn = entries.first().map_or(h.head_lsn, |e| e.0);
    let after = |k: usize| if k == 0 { head_lsn } else { entries[k - 1].0 + 1 };
    Ok(RegionCheck {
        log_id: h.log_id,
        capacity: cap,
        promised: h.promised,
        commit_epoch: h.commit_epoch,
        head_lsn,
        committed_lsn: after(committed),
        next_lsn: after(entries.len()),
        entries,
    })
}
