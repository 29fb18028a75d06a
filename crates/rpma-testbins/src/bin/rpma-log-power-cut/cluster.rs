//! `rpma-log-power-cut cluster-write REPLICAS TAG SEED TIMEOUT_MS [--check-only] [--ack-timeout
//! N] [--broken RULE,...]`: one writer incarnation of `scripts/test-cluster.sh`'s nemesis run, on a node of
//! the cluster, its replicas on other nodes.
//!
//! It opens the log (majority quorum, persistent flushes, writer id TAG, the reconnect thread on,
//! every wait bounded by TIMEOUT_MS, `--ack-timeout`: its connections' ACK timeout exponent) and prints what the recovery holds, entry by entry, as runs
//! of one writer: `OPEN head H next N epoch E took_us U (connect C buffers B headers D history Y
//! repair R)` (the open's phases, microseconds), then `RUN A B T` for the entries `A..B` the
//! incarnation tagged T appended (each entry is checked whole: its lsn, its tag and every byte
//! derived from both), `BAD lsn` for an entry that is not one a writer appended there, and
//! `OPENED`. The host's checker compares the runs with the acknowledgements it saw. Without
//! `--check-only` it appends entries tagged TAG, synced in groups of 1 to 32, printing `START n`
//! (before the runs: its first group is synced before the history is checked, so that a
//! failover's time does not include the checking) and `ACK n` after each sync (every entry
//! below n acknowledged), and `HEALTH i STATE
//! reason` for each change of a replica's health a sync saw, until an operation
//! fails: it prints `ERROR ...` and exits 3 (the nemesis made it fail: the host starts another
//! incarnation). Exits 2 on usage errors. Every line ends with ` @S`, the seconds since the
//! incarnation started.
//!
//! `--broken RULE,...` (a build with the `testing` feature) switches rules of rpma-log's writer
//! off ([`rpma_log::Broken`]): `blank_replicas_vote`, `repair_before_read_quorum`,
//! `sync_flush_visibility`, `ack_before_flush`, `tail_any_epoch`, `commit_word_ahead`,
//! `compare_pad_filler`.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use rpma::verbs::Verbs;
use rpma::{ContextType, Device, Peer};
use rpma_log::{FlushMode, Log, LogError, LogOptions, Quorum};

use super::{parse, replica_set, LOG_ID};

/// The payload of entry `lsn` appended by the incarnation tagged `tag`: 16 to 108 bytes, the lsn
/// and the tag first, then bytes derived from both.
pub fn payload(lsn: u64, tag: u64) -> Vec<u8> {
    let mix = lsn.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ tag.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    let len = 16 + (mix % 93) as usize;
    let mut p: Vec<u8> = (0..len).map(|k| (mix >> (8 * (k % 8))) as u8 ^ k as u8).collect();
    p[..8].copy_from_slice(&lsn.to_le_bytes());
    p[8..16].copy_from_slice(&tag.to_le_bytes());
    p
}

/// The tag of `entry` if it is exactly the payload some incarnation appended at `lsn`.
fn tag_of(lsn: u64, entry: &[u8]) -> Option<u64> {
    let tag = u64::from_le_bytes(entry.get(8..16)?.try_into().ok()?);
    (payload(lsn, tag) == entry).then_some(tag)
}

/// The rules `--broken` switches off.
#[cfg(feature = "testing")]
fn broken(names: &str) -> Result<rpma_log::Broken, String> {
    let mut b = rpma_log::Broken::none();
    for name in names.split(',') {
        match name {
            "blank_replicas_vote" => b.blank_replicas_vote = true,
            "repair_before_read_quorum" => b.repair_before_read_quorum = true,
            "sync_flush_visibility" => b.sync_flush_visibility = true,
            "ack_before_flush" => b.ack_before_flush = true,
            "tail_any_epoch" => b.tail_any_epoch = true,
            "commit_word_ahead" => b.commit_word_ahead = true,
            "compare_pad_filler" => b.compare_pad_filler = true,
            other => return Err(format!("no writer rule `{other}` to switch off")),
        }
    }
    Ok(b)
}

/// When the incarnation started (its lines say how long after).
static STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// Prints a line, then ` @S` (the seconds since the incarnation started), and flushes it (the
/// host reads the lines as they come).
fn say(line: std::fmt::Arguments<'_>) {
    let at = STARTED.get_or_init(std::time::Instant::now).elapsed().as_secs_f64();
    let out = std::io::stdout();
    let mut o = out.lock();
    let _ = writeln!(o, "{line} @{at:.3}");
    let _ = o.flush();
}

/// The incarnation; `args` are the arguments after `cluster-write`.
pub fn run(args: &[String]) -> Result<ExitCode, String> {
    let usage =
        "usage: rpma-log-power-cut cluster-write REPLICAS TAG SEED TIMEOUT_MS [--check-only] [--ack-timeout N] [--broken RULE,...]";
    let [replicas, tag, seed, timeout, rest @ ..] = args else { return Err(usage.to_owned()) };
    STARTED.get_or_init(std::time::Instant::now);
    let tag: u64 = parse("TAG", tag)?;
    let seed: u64 = parse("SEED", seed)?;
    let timeout = Duration::from_millis(parse("TIMEOUT_MS", timeout)?);
    let (mut check_only, mut opts) = (false, LogOptions::new(LOG_ID));
    let mut rest = rest.iter();
    while let Some(a) = rest.next() {
        match a.as_str() {
            "--check-only" => check_only = true,
            "--ack-timeout" => opts = opts.ack_timeout(parse("--ack-timeout", rest.next().ok_or(usage)?)?),
            #[cfg(feature = "testing")]
            "--broken" => opts = opts.broken(broken(rest.next().ok_or(usage)?)?),
            #[cfg(not(feature = "testing"))]
            "--broken" => return Err("--broken needs a build with the testing feature".to_owned()),
            _ => return Err(usage.to_owned()),
        }
    }
    let set = replica_set(replicas)?;
    let t = Verbs::new();
    let dev = Device::lookup(&t, &set[0].addr, ContextType::Remote).map_err(|e| format!("Device::lookup: {e}"))?;
    let peer = Peer::new(&dev).map_err(|e| format!("Peer::new: {e}"))?;
    opts = opts
        .quorum(Quorum::Majority)
        .flush(FlushMode::Persistent)
        .writer_id(tag)
        .reconnect_in_background(true)
        .reconnect_backoff(Duration::from_millis(100), Duration::from_millis(1000))
        .timeout(timeout);
    let fail = |what: &str, e: LogError| {
        say(format_args!("ERROR {what}: {e}"));
        Ok(ExitCode::from(3))
    };
    let (mut log, report) = match Log::open(&peer, &set, opts) {
        Ok(x) => x,
        Err(e) => return fail("open", e),
    };
    let (p, us) = (&report.phases, |d: Duration| d.as_micros());
    say(format_args!(
        "OPEN head {} next {} epoch {} took_us {} (connect {} buffers {} headers {} history {} repair {})",
        report.head_lsn,
        report.next_lsn,
        report.epoch,
        us(p.total()),
        us(p.connect),
        us(p.buffers),
        us(p.headers),
        us(p.history),
        us(p.repair)
    ));
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut lsn = report.next_lsn;
    // A writer's first sync comes before the history is checked (the checking reads every
    // entry, one round trip each, and must not count in the failover's time); entries below
    // `next` do not change meanwhile.
    if !check_only {
        say(format_args!("START {}", report.next_lsn));
        if let Err(e) = group(&mut log, &mut rng, &mut lsn, tag) {
            return fail(&e.0, e.1);
        }
    }
    let mut run: Option<(u64, u64, u64)> = None; // (first lsn, end, tag)
    for lsn in report.head_lsn..report.next_lsn {
        let entry = match log.read(lsn) {
            Ok(e) => e,
            Err(e) => return fail(&format!("read {lsn}"), e),
        };
        match tag_of(lsn, &entry) {
            Some(t) => match &mut run {
                Some((_, end, rt)) if *rt == t && *end == lsn => *end += 1,
                _ => {
                    if let Some((a, b, rt)) = run.replace((lsn, lsn + 1, t)) {
                        say(format_args!("RUN {a} {b} {rt}"));
                    }
                }
            },
            None => say(format_args!("BAD {lsn} ({} bytes)", entry.len())),
        }
    }
    if let Some((a, b, rt)) = run {
        say(format_args!("RUN {a} {b} {rt}"));
    }
    say(format_args!("OPENED"));
    if check_only {
        return Ok(ExitCode::SUCCESS);
    }
    loop {
        if let Err(e) = group(&mut log, &mut rng, &mut lsn, tag) {
            return fail(&e.0, e.1);
        }
    }
}

/// Appends a group of 1 to 32 entries tagged `tag` from `lsn` on and syncs them: prints the
/// health changes the sync saw and `ACK n`; the failed operation's name and error otherwise.
fn group(log: &mut Log<Verbs>, rng: &mut fastrand::Rng, lsn: &mut u64, tag: u64) -> Result<(), (String, LogError)> {
    for _ in 0..rng.u64(1..=32) {
        match log.append(&payload(*lsn, tag)) {
            Ok(l) if l == *lsn => *lsn += 1,
            Ok(l) => return Err((format!("append {lsn}"), LogError::Invalid(format!("lsn {l}, expected {lsn}")))),
            Err(e) => return Err((format!("append {lsn}"), e)),
        }
    }
    let synced = log.sync(*lsn - 1);
    for e in log.health_events() {
        say(format_args!("HEALTH {} {:?} {}", e.replica, e.health, e.reason.as_deref().unwrap_or("")));
    }
    match synced {
        Ok(n) => {
            say(format_args!("ACK {n}"));
            Ok(())
        }
        Err(e) => Err((format!("sync to {lsn}"), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::{payload, tag_of};

    #[test]
    fn an_entry_names_its_writer_and_nothing_else_passes() {
        let p = payload(42, 7);
        assert_eq!(tag_of(42, &p), Some(7));
        assert_eq!(tag_of(43, &p), None, "another lsn");
        let mut q = p.clone();
        q[8] ^= 1;
        assert_eq!(tag_of(42, &q), None, "another tag with the first one's bytes");
        let mut r = p;
        *r.last_mut().unwrap() ^= 0x80;
        assert_eq!(tag_of(42, &r), None, "a byte changed");
        assert_eq!(tag_of(42, &[0; 8]), None, "too short");
    }
}
