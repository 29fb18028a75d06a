//! What `rpma log bench` reports: a result per mode, the ratios to the baseline, as a table or JSON.

use serde::Serialize;

use rpma_bench::Latency;

use super::options::*;

/// The result of one mode.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct LogResult {
    /// `"qd1"` or `"group-commit"`.
    pub(crate) mode: &'static str,
    /// Replicas in the set.
    pub(crate) replicas: usize,
    /// Replicas each sync waits for.
    pub(crate) quorum: usize,
    /// `"persistent"` or `"visibility"`.
    pub(crate) flush: &'static str,
    /// Payload bytes per entry.
    pub(crate) size: usize,
    /// Appends per sync (1 for `qd1`).
    pub(crate) group: usize,
    /// Appends measured.
    pub(crate) appends: u64,
    /// Syncs measured.
    pub(crate) syncs: u64,
    /// Measured time, seconds.
    pub(crate) elapsed_s: f64,
    /// Appends made durable on a quorum per second.
    pub(crate) synced_appends_per_s: f64,
    /// Payload bandwidth, MB/s (10^6 bytes per second).
    pub(crate) mb_s: f64,
    /// Truncations of the log's prefix during the measurement (the ring was full).
    pub(crate) truncations: u64,
    /// `qd1`: each append + sync, nanoseconds; `group-commit`: each group's appends and sync.
    pub(crate) latency_ns: Latency,
    /// How the writer waited for completions: `"spin"` or `"sleep"` (`--wait`; the baseline
    /// spins).
    pub(crate) wait: &'static str,
    /// The CPU time of the writer's thread during the measurement, per synced append,
    /// nanoseconds (clock_gettime(2)'s `CLOCK_THREAD_CPUTIME_ID`; replicas served by this
    /// process run on threads of their own and are not counted).
    pub(crate) cpu_ns_per_append: f64,
}

/// `rpma log bench`'s report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct LogBenchReport {
    /// [`SCHEMA_VERSION`].
    pub(crate) schema: u32,
    /// `"mock"` or `"verbs"`.
    pub(crate) backend: &'static str,
    /// Whether this process served the replicas.
    pub(crate) self_hosted: bool,
    /// The replicas' addresses.
    pub(crate) replicas: Vec<String>,
    /// The ring's bytes.
    pub(crate) capacity: u64,
    /// One per mode and round, in the order run.
    pub(crate) results: Vec<LogResult>,
    /// `--baseline`: the hand-written baseline's results, one per mode and round.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) baseline: Vec<LogResult>,
    /// `--baseline`: per mode, the medians of the rounds and their ratios.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) ratios: Vec<Ratio>,
    /// `--mode failover`: one per round.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) failovers: Vec<FailoverResult>,
}

/// The takeovers of one round of `--mode failover`: medians of each phase, nanoseconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct FailoverResult {
    /// Whether each new writer stood by with its buffers made (`--standby`).
    pub(crate) standby: bool,
    /// The log's replicas.
    pub(crate) replicas: usize,
    /// The history each new writer took over (bytes of records).
    pub(crate) history_bytes: u64,
    /// Takeovers measured.
    pub(crate) takeovers: u64,
    /// The median queue-depth-1 append + sync of the same run, just before the takeovers.
    pub(crate) sync_p50_ns: u64,
    /// Connecting to the replicas (each one fencing the old writer).
    pub(crate) connect_ns: u64,
    /// Allocating and registering the new writer's buffers.
    pub(crate) buffers_ns: u64,
    /// Reading the replicas' headers.
    pub(crate) headers_ns: u64,
    /// Finding and reading the history.
    pub(crate) history_ns: u64,
    /// Repairing the replicas and installing the new epoch.
    pub(crate) repair_ns: u64,
    /// The new writer's first append + sync.
    pub(crate) first_sync_ns: u64,
    /// The median of the whole takeovers (the open and the first sync).
    pub(crate) takeover_ns: u64,
    /// `takeover_ns / sync_p50_ns`.
    pub(crate) takeover_in_syncs: f64,
    /// Replicas of this process: the median of as many rounds of bare handshakes with as many
    /// servers of this process, the floor of `connect` (log_cmd/handshake.rs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) handshake_ns: Option<u64>,
    /// `handshake_ns / sync_p50_ns`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) handshake_in_syncs: Option<f64>,
    /// `takeover_ns / handshake_ns`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) takeover_in_handshakes: Option<f64>,
}

impl FailoverResult {
    /// Adds the bare handshake's median, `ns`.
    pub(crate) fn with_handshake(&mut self, ns: u64) {
        self.handshake_ns = Some(ns);
        self.handshake_in_syncs = Some(ns as f64 / self.sync_p50_ns.max(1) as f64);
        self.takeover_in_handshakes = Some(self.takeover_ns as f64 / ns.max(1) as f64);
    }
}

/// The log against its hand-written baseline, one mode, medians of the rounds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Ratio {
    /// `"qd1"` or `"group-commit"`.
    pub(crate) mode: &'static str,
    /// Rounds.
    pub(crate) rounds: usize,
    /// The log's median p50 latency, nanoseconds (`qd1`: of an append + sync).
    pub(crate) log_p50_ns: u64,
    /// The baseline's median p50 latency, nanoseconds.
    pub(crate) baseline_p50_ns: u64,
    /// The log's median rate (synced appends per second).
    pub(crate) log_per_s: f64,
    /// The baseline's median rate (`qd1`: appends + commits per second; `group-commit`: writes
    /// to every replica per second).
    pub(crate) baseline_per_s: f64,
    /// `log_p50_ns / baseline_p50_ns`: what an append + sync costs over the hand-written one.
    pub(crate) latency_ratio: f64,
    /// `log_per_s / baseline_per_s`.
    pub(crate) rate_ratio: f64,
}

impl LogBenchReport {
    /// Writes the report as a table, or as JSON with `json`.
    ///
    /// # Errors
    /// If `out` fails.
    pub(crate) fn write(&self, json: bool, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        if json {
            serde_json::to_writer_pretty(&mut *out, self)?;
            return writeln!(out);
        }
        let hosted = if self.self_hosted { "served by this process" } else { "remote" };
        writeln!(
            out,
            "rpma log bench: {} backend, {} replica(s) ({hosted}: {}), ring of {} bytes",
            self.backend,
            self.replicas.len(),
            self.replicas.join(", "),
            self.capacity
        )?;
        writeln!(
            out,
            "{:<13} {:>5} {:>8} {:>6} {:>6} {:>10} {:>11} {:>16} {:>9} {:>9} {:>9} {:>9} {:>12}",
            "mode",
            "wait",
            "replicas",
            "quorum",
            "size",
            "appends",
            "group",
            "synced_appends/s",
            "p50_ns",
            "p99_ns",
            "mean_ns",
            "max_ns",
            "cpu_ns/append"
        )?;
        for r in self.results.iter().chain(&self.baseline) {
            writeln!(
                out,
                "{:<13} {:>5} {:>8} {:>6} {:>6} {:>10} {:>11} {:>16.0} {:>9} {:>9} {:>9.0} {:>9} {:>12.0}",
                if self.baseline.iter().any(|b| std::ptr::eq(b, r)) {
                    format!("{}*", r.mode)
                } else {
                    r.mode.to_owned()
                },
                r.wait,
                r.replicas,
                r.quorum,
                r.size,
                r.appends,
                r.group,
                r.synced_appends_per_s,
                r.latency_ns.p50,
                r.latency_ns.p99,
                r.latency_ns.mean,
                r.latency_ns.max,
                r.cpu_ns_per_append
            )?;
        }
        if !self.baseline.is_empty() {
            writeln!(out, "(* the hand-written baseline)")?;
        }
        for f in &self.failovers {
            writeln!(
                out,
                "failover: {} takeovers{} of {} bytes of history (medians, ns): connect {} buffers {} headers {} \
                 history {} repair {} first sync {}; takeover {} = {:.1} qd1 syncs of {}",
                f.takeovers,
                if f.standby { " by writers standing by" } else { "" },
                f.history_bytes,
                f.connect_ns,
                f.buffers_ns,
                f.headers_ns,
                f.history_ns,
                f.repair_ns,
                f.first_sync_ns,
                f.takeover_ns,
                f.takeover_in_syncs,
                f.sync_p50_ns
            )?;
            if let (Some(h), Some(hs), Some(th)) = (f.handshake_ns, f.handshake_in_syncs, f.takeover_in_handshakes) {
                writeln!(
                    out,
                    "failover: a bare handshake with {} servers of this process (median): {h} ns = {hs:.1} qd1 syncs; \
                     connect = {:.2} of it, takeover = {th:.2}",
                    f.replicas,
                    f.connect_ns as f64 / h.max(1) as f64,
                )?;
            }
        }
        for q in &self.ratios {
            writeln!(
                out,
                "{}: log / baseline over {} rounds (medians): p50 {} / {} ns = {:.3}; rate {:.0} / {:.0} per s = {:.3}",
                q.mode,
                q.rounds,
                q.log_p50_ns,
                q.baseline_p50_ns,
                q.latency_ratio,
                q.log_per_s,
                q.baseline_per_s,
                q.rate_ratio
            )?;
        }
        Ok(())
    }
}

/// The median of `v` (the upper one of an even count).
pub(super) fn median<X: Copy + PartialOrd>(mut v: Vec<X>) -> Option<X> {
    v.sort_by(|x, y| x.partial_cmp(y).unwrap_or(std::cmp::Ordering::Equal));
    v.get(v.len() / 2).copied()
}

/// Per mode, the medians of the rounds of the log and of the baseline, and their ratios.
pub(super) fn ratios(modes: &[Mode], log: &[LogResult], base: &[LogResult]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for m in modes {
        let of = |rs: &[LogResult]| -> Vec<LogResult> { rs.iter().filter(|r| r.mode == m.name()).cloned().collect() };
        let (l, b) = (of(log), of(base));
        let (Some(lp), Some(bp), Some(lr), Some(br)) = (
            median(l.iter().map(|r| r.latency_ns.p50).collect()),
            median(b.iter().map(|r| r.latency_ns.p50).collect()),
            median(l.iter().map(|r| r.synced_appends_per_s).collect()),
            median(b.iter().map(|r| r.synced_appends_per_s).collect()),
        ) else {
            continue;
        };
        out.push(Ratio {
            mode: m.name(),
            rounds: l.len(),
            log_p50_ns: lp,
            baseline_p50_ns: bp,
            log_per_s: lr,
            baseline_per_s: br,
            latency_ratio: lp as f64 / bp.max(1) as f64,
            rate_ratio: lr / br,
        });
    }
    out
}
