//! Whether flushes and atomic writes went native or emulated (docs/native-ops.md), for the
//! scenarios' reports and the benchmark.
//!
//! Where the answer comes from depends on the backend ([`op_counts`]):
//! - verbs counts every flush and atomic write it posts, by path (`rpma::verbs::op_counts()`,
//!   process-wide): an [`OpWatch`] takes the difference around the operations;
//! - the mock keeps no counters, and its path follows its capabilities alone (a flush is native
//!   if the device reports `native_flush`, whatever its type; an atomic write if it reports
//!   `native_atomic_write`): an [`OpWatch`] attributes the operations the caller says it posted
//!   by the device's [`Capabilities`].
//!
//! The verbs counters are process-wide: in a process that runs other flushes at the same time
//! (several scenarios in one test binary, say), a difference includes theirs.

use std::fmt;

use rpma::{Capabilities, Transport};
use serde::Serialize;

/// Flushes and atomic writes by the path they took (`rpma_verbs::OpCounts`, for any backend).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OpCounts {
    /// Native flushes (`IBV_WR_FLUSH`).
    pub flush_native: u64,
    /// Flushes emulated with an 8-byte RDMA Read (APM): the device or QP has no native flush.
    pub flush_emulated: u64,
    /// Persistent flushes on a device with native flush: RDMA Reads by rule (verbs only).
    pub flush_persistent_read: u64,
    /// Native atomic writes (`IBV_WR_ATOMIC_WRITE`).
    pub atomic_write_native: u64,
    /// Atomic writes emulated with a fenced 8-byte RDMA Write.
    pub atomic_write_emulated: u64,
}

impl OpCounts {
    /// What was counted since `earlier`.
    #[must_use]
    pub const fn since(self, earlier: Self) -> Self {
        Self {
            flush_native: self.flush_native.saturating_sub(earlier.flush_native),
            flush_emulated: self.flush_emulated.saturating_sub(earlier.flush_emulated),
            flush_persistent_read: self.flush_persistent_read.saturating_sub(earlier.flush_persistent_read),
            atomic_write_native: self.atomic_write_native.saturating_sub(earlier.atomic_write_native),
            atomic_write_emulated: self.atomic_write_emulated.saturating_sub(earlier.atomic_write_emulated),
        }
    }

    /// Counts for `flushes` flushes and `atomic_writes` atomic writes on a device with `caps`
    /// that decides by its capabilities alone (the mock).
    #[must_use]
    pub const fn by_capabilities(caps: &Capabilities, flushes: u64, atomic_writes: u64) -> Self {
        let (fl, aw) = (caps.native_flush, caps.native_atomic_write);
        Self {
            flush_native: if fl { flushes } else { 0 },
            flush_emulated: if fl { 0 } else { flushes },
            flush_persistent_read: 0,
            atomic_write_native: if aw { atomic_writes } else { 0 },
            atomic_write_emulated: if aw { 0 } else { atomic_writes },
        }
    }

    /// The path the flushes took, `None` if there was none.
    #[must_use]
    pub fn flush(&self) -> Option<OpPath> {
        OpPath::of(&[
            (OpPath::Native, self.flush_native),
            (OpPath::Emulated, self.flush_emulated),
            (OpPath::PersistentRead, self.flush_persistent_read),
        ])
    }

    /// The path the atomic writes took, `None` if there was none.
    #[must_use]
    pub fn atomic_write(&self) -> Option<OpPath> {
        OpPath::of(&[(OpPath::Native, self.atomic_write_native), (OpPath::Emulated, self.atomic_write_emulated)])
    }
}

/// The process-wide counts of flushes and atomic writes by path, on a backend that counts them
/// (verbs: `rpma::verbs::op_counts()`), or `None` on one whose path follows the device's
/// capabilities alone (the mock).
#[must_use]
pub fn op_counts<T: Transport>() -> Option<OpCounts> {
    #[cfg(feature = "verbs")]
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<rpma::verbs::Verbs>() {
        let c = rpma::verbs::op_counts();
        return Some(OpCounts {
            flush_native: c.flush_native,
            flush_emulated: c.flush_emulated,
            flush_persistent_read: c.flush_persistent_read,
            atomic_write_native: c.atomic_write_native,
            atomic_write_emulated: c.atomic_write_emulated,
        });
    }
    None
}

/// How a kind of operation went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpPath {
    /// Every one native.
    Native,
    /// Every one emulated (a flush: an RDMA Read; an atomic write: a fenced RDMA Write).
    Emulated,
    /// Persistent flushes on a device with native flush, posted as RDMA Reads by the process's
    /// choice (`RPMA_VERBS_PERSISTENT_FLUSH=read`, `rpma bench --persistent-flush read`;
    /// docs/native-ops.md, "The persistent flush rule").
    PersistentRead,
    /// Some one way, some another.
    Mixed,
}

impl OpPath {
    fn of(counts: &[(Self, u64)]) -> Option<Self> {
        let mut taken = counts.iter().filter(|(_, n)| *n > 0);
        let first = taken.next()?.0;
        Some(if taken.next().is_some() { Self::Mixed } else { first })
    }

    /// The name in JSON and tables.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::Emulated => "emulated",
            Self::PersistentRead => "persistent_read",
            Self::Mixed => "mixed",
        }
    }
}

impl fmt::Display for OpPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where an [`OpUse`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The backend's counters of posted operations (verbs).
    Counters,
    /// The device's capabilities (the mock, whose path follows them).
    Capabilities,
}

/// The flushes and atomic writes of some operations, and how that is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpUse {
    /// The counts.
    pub counts: OpCounts,
    /// Where they come from.
    pub source: Source,
}

impl OpUse {
    /// `"flush native; counted by rpma-verbs"`, `"flush emulated (RDMA Read), atomic write
    /// native; from the device's capabilities"`, ...: each kind that was posted, and how that is
    /// known; `"no RDMA flush or atomic write posted"` if none was.
    #[must_use]
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = self.counts.flush() {
            parts.push(match p {
                OpPath::Native => "flush native".to_owned(),
                OpPath::Emulated => "flush emulated (RDMA Read)".to_owned(),
                OpPath::PersistentRead => "flush as RDMA Read (persistent, by rule)".to_owned(),
                OpPath::Mixed => {
                    let c = &self.counts;
                    format!(
                        "flush mixed ({} native, {} emulated, {} persistent read)",
                        c.flush_native, c.flush_emulated, c.flush_persistent_read
                    )
                }
            });
        }
        if let Some(p) = self.counts.atomic_write() {
            parts.push(match p {
                OpPath::Native => "atomic write native".to_owned(),
                OpPath::Emulated => "atomic write emulated (fenced RDMA Write)".to_owned(),
                OpPath::PersistentRead | OpPath::Mixed => format!(
                    "atomic write mixed ({} native, {} emulated)",
                    self.counts.atomic_write_native, self.counts.atomic_write_emulated
                ),
            });
        }
        match (parts.is_empty(), self.source) {
            (true, Source::Counters) => "no RDMA flush or atomic write posted; counted by rpma-verbs".to_owned(),
            (true, Source::Capabilities) => "no RDMA flush or atomic write posted".to_owned(),
            (false, Source::Counters) => format!("{}; counted by rpma-verbs", parts.join(", ")),
            (false, Source::Capabilities) => format!("{}; from the device's capabilities", parts.join(", ")),
        }
    }
}

/// Watches the flushes and atomic writes of some operations: [`OpWatch::start`] before them,
/// [`OpWatch::finish`] after.
#[derive(Clone, Debug)]
pub struct OpWatch {
    before: Option<OpCounts>,
    caps: Capabilities,
}

impl OpWatch {
    /// Starts watching operations of transport `T` on a device with `caps`.
    #[must_use]
    pub fn start<T: Transport>(caps: &Capabilities) -> Self {
        Self { before: op_counts::<T>(), caps: caps.clone() }
    }

    /// What happened since [`OpWatch::start`]: the counters' difference on a backend that
    /// counts, else `flushes` and `atomic_writes` (what the caller posted) by the capabilities.
    #[must_use]
    pub fn finish<T: Transport>(&self, flushes: u64, atomic_writes: u64) -> OpUse {
        match (self.before, op_counts::<T>()) {
            (Some(before), Some(now)) => OpUse { counts: now.since(before), source: Source::Counters },
            _ => OpUse {
                counts: OpCounts::by_capabilities(&self.caps, flushes, atomic_writes),
                source: Source::Capabilities,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_descriptions() {
        let mut caps = Capabilities::roce_defaults();
        let c = OpCounts::by_capabilities(&caps, 3, 2);
        assert_eq!((c.flush(), c.atomic_write()), (Some(OpPath::Emulated), Some(OpPath::Emulated)));
        caps.native_flush = true;
        let c = OpCounts::by_capabilities(&caps, 3, 0);
        assert_eq!((c.flush(), c.atomic_write()), (Some(OpPath::Native), None));
        let u = OpUse { counts: c, source: Source::Capabilities };
        assert_eq!(u.describe(), "flush native; from the device's capabilities");
        let mixed =
            OpCounts { flush_native: 1, flush_persistent_read: 2, atomic_write_native: 4, ..OpCounts::default() };
        assert_eq!(mixed.flush(), Some(OpPath::Mixed));
        let later =
            OpCounts { flush_native: 5, flush_persistent_read: 2, atomic_write_native: 4, ..OpCounts::default() };
        let d = later.since(mixed);
        assert_eq!((d.flush(), d.atomic_write()), (Some(OpPath::Native), None));
        let u =
            OpUse { counts: OpCounts { flush_persistent_read: 1, ..OpCounts::default() }, source: Source::Counters };
        assert_eq!(u.describe(), "flush as RDMA Read (persistent, by rule); counted by rpma-verbs");
        let none = OpUse { counts: OpCounts::default(), source: Source::Capabilities };
        assert_eq!(none.describe(), "no RDMA flush or atomic write posted");
        assert_eq!(serde_json::to_value(OpPath::PersistentRead).unwrap(), "persistent_read");
    }
}
