//! What a run registers, per connection and side, sized by the operations that use each region
//! (a write-only run posts no message, so its receive buffers are empty), and the check that a
//! run fits in the memory available before anything is allocated.

use anyhow::{bail, Result};

use super::op::Op;
use super::plan::{Plan, Role};

/// The largest target region (operations beyond it wrap to offset 0).
pub const MAX_REGION: usize = 256 << 20;

/// The smallest region registered where one must exist (its descriptor is exchanged) but no
/// operation of the run uses it.
pub const PLACEHOLDER: usize = 8;

/// The length of a region of `qd` slots of `max` bytes (capped at [`MAX_REGION`], at least one
/// slot).
#[must_use]
pub fn region_len(max: usize, qd: usize) -> usize {
    max.saturating_mul(qd).min(MAX_REGION).max(max)
}

fn max_of(plan: &Plan, uses: impl Fn(Op) -> bool) -> usize {
    if plan.ops.iter().any(|op| uses(*op)) {
        plan.sizes.iter().copied().max().unwrap_or(0)
    } else {
        0
    }
}

/// Bytes registered per connection for a plan's runs, on each side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    /// Queue depth per connection.
    pub qd: usize,
    /// The largest message written, read or flushed in the server's target region (0: none).
    pub target_max: usize,
    /// The largest message the client sends or writes from, or reads into (0: none).
    pub local_max: usize,
    /// The largest echo the client receives (0: its receives are zero-length).
    pub client_recv_max: usize,
    /// The largest message the server receives (0: its receives are zero-length).
    pub server_recv_max: usize,
    /// The largest echo or `write-pingpong` pong the server sends or writes (0: none).
    pub source_max: usize,
    /// The largest `write-pingpong` pong the client's inbox takes (0: none).
    pub inbox_max: usize,
}

impl Footprint {
    /// The footprint of `plan`.
    #[must_use]
    pub fn of(plan: &Plan) -> Self {
        let uses_target = |op| !matches!(op, Op::Send | Op::SendImm);
        let uses_local = |op| !matches!(op, Op::Flush | Op::AtomicWrite);
        let echoed = |op: Op| op.is_ping_pong();
        Self {
            qd: plan.qd,
            target_max: max_of(plan, uses_target),
            local_max: max_of(plan, uses_local),
            client_recv_max: max_of(plan, echoed),
            server_recv_max: max_of(plan, |op| matches!(op, Op::Send | Op::SendImm)),
            source_max: max_of(plan, |op| echoed(op) || op == Op::WritePingpong),
            inbox_max: max_of(plan, |op| op == Op::WritePingpong),
        }
    }

    /// The client's local region.
    #[must_use]
    pub fn local_len(&self) -> usize {
        region_len(self.local_max, self.qd).max(PLACEHOLDER)
    }

    /// The client's receive buffers (`qd` slots; none if zero-length).
    #[must_use]
    pub fn client_recv_len(&self) -> usize {
        self.client_recv_max.saturating_mul(self.qd)
    }

    /// The client's inbox.
    #[must_use]
    pub fn inbox_len(&self) -> usize {
        self.inbox_max.max(PLACEHOLDER)
    }

    /// The server's target region.
    #[must_use]
    pub fn target_len(&self) -> usize {
        region_len(self.target_max, self.qd).max(PLACEHOLDER)
    }

    /// The server's receive buffers (`qd + 1` slots, [`PLACEHOLDER`] bytes each if the run
    /// sends only zero-length control messages).
    #[must_use]
    pub fn server_recv_len(&self) -> usize {
        self.server_recv_max.max(PLACEHOLDER).saturating_mul(self.qd + 1)
    }

    /// The client's bytes per connection.
    #[must_use]
    pub fn client_bytes(&self) -> u128 {
        (self.local_len() + self.inbox_len()) as u128 + self.client_recv_len() as u128
    }

    /// The server's bytes per connection.
    #[must_use]
    pub fn server_bytes(&self) -> u128 {
        self.target_len() as u128 + self.server_recv_len() as u128 + self.source_max as u128
    }
}

/// The bytes `plan` allocates in this process: both sides of every connection when both run
/// here (the mock, loopback), one side otherwise; and the memcpy baseline's two buffers.
#[must_use]
pub fn bytes_needed(plan: &Plan) -> u128 {
    let f = Footprint::of(plan);
    let per_conn = match plan.role {
        Role::Loopback => f.client_bytes() + f.server_bytes(),
        Role::Server => f.server_bytes(),
        Role::Client { .. } => f.client_bytes(),
    };
    let baseline = if plan.baseline { 2 * plan.max_size() as u128 } else { 0 };
    per_conn * plan.conns as u128 + baseline
}

/// `MemAvailable` of `/proc/meminfo`, bytes (`None` if it cannot be read).
#[must_use]
pub fn mem_available() -> Option<u128> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&info)
}

/// `MemAvailable` of a `/proc/meminfo` text, bytes.
#[must_use]
pub fn parse_mem_available(info: &str) -> Option<u128> {
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut words = line.split_whitespace().skip(1);
    let n: u128 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") | None => Some(n * 1024),
        Some(_) => None,
    }
}

fn gib(b: u128) -> String {
    format!("{:.1} GiB", b as f64 / f64::from(1u32 << 30))
}

/// Refuses a run that needs more than `available` bytes.
///
/// # Errors
/// One line naming what the run needs and what is available.
pub fn check_fits(plan: &Plan, available: Option<u128>) -> Result<()> {
    let need = bytes_needed(plan);
    if let Some(avail) = available {
        if need > avail {
            let sides = if plan.role == Role::Loopback { " (client and server sides, in this process)" } else { "" };
            bail!(
                "the run needs {} of memory{sides} for --size {} × --qd {} × --conns {}, but {} is available \
                 (MemAvailable): use a smaller --size, --qd or --conns",
                gib(need),
                plan.max_size(),
                plan.qd,
                plan.conns,
                gib(avail)
            );
        }
    }
    Ok(())
}
