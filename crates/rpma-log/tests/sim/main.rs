//! The deterministic simulator of rpma-log (docs/log.md, "How it is proven"): the real writer
//! and replica code as actors of a simulated mock fabric (`rpma::mock::sim`), 2-3 writers and 3
//! or 5 replicas, under a nemesis drawn from the seed (power cuts with unflushed bytes lost,
//! kept or torn at 8 bytes; replicas restarted without their memory; partitions one way or
//! both; dropped connections; writers killed and restarted; paused writers), every interleaving
//! of their steps and of the fabric's work requests drawn from the seed too. The checker holds
//! every acknowledgement and every recovery against the promise; at the end every fault heals
//! and one writer must open and sync (liveness). A failing seed replays exactly; its plan of
//! faults is shrunk to the ones the violation needs.
//!
//! - `cargo test -p rpma-log --test sim`: the batch of seeds `SIM_BASE..` (default 0) for
//!   `SIM_SECS` seconds (default 20), on every core; with `--include-ignored`, each deliberately
//!   broken variant (`rpma_log::Broken`) must be caught too (`SIM_MUTANT_SEEDS` at most).
//! - `SIM_SEED=<seed> cargo test -p rpma-log --test sim -- replay`: one seed, its history and
//!   the shrunk plan.
//! - `scripts/sim.sh`: a long run (millions of seeds).

mod check;
mod downs;
mod nodes;
mod plan;
mod world;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use libtest_mimic::{Arguments, Failed, Trial};
use rpma_log::Broken;

use plan::{draw, Planned};
use world::{run, Outcome};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Cuts `plan` down to the faults the violation of `seed` needs (each fault removed in turn,
/// kept out if the run still fails), within `budget` of real time.
fn shrink(seed: u64, broken: Broken, plan: Vec<Planned>, budget: Duration) -> (Vec<Planned>, Outcome) {
    let (cfg, _) = draw(seed, broken);
    let start = Instant::now();
    let mut best = plan;
    let mut outcome = run(seed, &cfg, &best);
    let mut i = 0;
    while i < best.len() && start.elapsed() < budget {
        let mut fewer = best.clone();
        fewer.remove(i);
        let o = run(seed, &cfg, &fewer);
        if o.violations.is_empty() {
            i += 1;
        } else {
            best = fewer;
            outcome = o;
        }
    }
    (best, outcome)
}

/// The report of a failing seed.
fn report(seed: u64, broken: Broken, shrink_for: Duration) -> String {
    let (cfg, plan) = draw(seed, broken);
    let (plan, o) = shrink(seed, broken, plan, shrink_for);
    let mut s = format!("seed {seed} ({cfg:?})\nviolations:\n");
    for v in &o.violations {
        s += &format!("  {v}\n");
    }
    s += "the faults it needs (shrunk plan):\n";
    for p in &plan {
        s += &format!("  {p}\n");
    }
    s += "history of that run (faults and the writers' milestones, virtual time):\n";
    for h in &o.history {
        s += &format!("  {h}\n");
    }
    s += &format!("replay: SIM_SEED={seed} cargo test -p rpma-log --test sim -- replay --nocapture\n");
    s
}

/// Runs seeds `base..` on `threads` threads until one fails, `seeds` ran, or `secs` passed.
/// Returns the seeds run, the time, the totals, and the first failing seed.
fn batch(base: u64, seeds: u64, secs: u64, broken: Broken) -> (u64, Duration, Totals, Option<u64>) {
    let next = AtomicU64::new(base);
    let stop = AtomicBool::new(false);
    let failed = Mutex::new(None::<u64>);
    let totals = Mutex::new(Totals::default());
    let start = Instant::now();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while !stop.load(Ordering::Acquire) && start.elapsed() < Duration::from_secs(secs) {
                    let seed = next.fetch_add(1, Ordering::AcqRel);
                    if seed >= base + seeds {
                        break;
                    }
                    let (cfg, plan) = draw(seed, broken);
                    let o = run(seed, &cfg, &plan);
                    totals.lock().unwrap().add(&o);
                    if !o.violations.is_empty() {
                        let mut f = failed.lock().unwrap();
                        if f.map_or(true, |x| seed < x) {
                            *f = Some(seed);
                        }
                        stop.store(true, Ordering::Release);
                    }
                }
            });
        }
    });
    let t = totals.into_inner().unwrap();
    (t.seeds, start.elapsed(), t, failed.into_inner().unwrap())
}

#[derive(Default, Debug)]
struct Totals {
    seeds: u64,
    steps: u64,
    acked: u64,
    syncs: u64,
    recoveries: u64,
    faults: u64,
}

impl Totals {
    fn add(&mut self, o: &Outcome) {
        self.seeds += 1;
        self.steps += o.steps;
        self.acked += o.acked as u64;
        self.syncs += o.syncs;
        self.recoveries += o.recoveries;
        self.faults += o.faults as u64;
    }
}

fn simulate() -> Result<(), Failed> {
    let base = env_u64("SIM_BASE", 0);
    let secs = env_u64("SIM_SECS", 20);
    let seeds = env_u64("SIM_SEEDS", u64::MAX / 2);
    let (n, took, t, failed) = batch(base, seeds, secs, Broken::none());
    println!(
        "sim: seeds {base}..{}, {n} runs in {:.1} s ({:.1} seeds/s), {} steps, {} faults, {} syncs, {} acknowledged entries, {} recoveries checked, violations: {}",
        base + n,
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64(),
        t.steps,
        t.faults,
        t.syncs,
        t.acked,
        t.recoveries,
        usize::from(failed.is_some())
    );
    match failed {
        Some(seed) => Err(report(seed, Broken::none(), Duration::from_secs(120)).into()),
        None => Ok(()),
    }
}

/// A deliberately broken variant must be caught within `max` seeds.
fn catches(name: &'static str, broken: Broken, max: u64) -> Result<(), Failed> {
    let base = env_u64("SIM_BASE", 0);
    let (n, took, _, failed) = batch(base, max, env_u64("SIM_MUTANT_SECS", 300), broken);
    match failed {
        Some(seed) => {
            let r = report(seed, broken, Duration::from_secs(20));
            let first = r.lines().skip(2).find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_owned();
            println!("sim: {name}: caught at seed {seed} after {n} runs in {:.1} s: {first}", took.as_secs_f64());
            if std::env::var_os("SIM_VERBOSE").is_some() {
                println!("{r}");
            }
            Ok(())
        }
        None => {
            Err(format!("{name}: no violation in {n} runs ({:.1} s): the simulator cannot see it", took.as_secs_f64())
                .into())
        }
    }
}

fn mutant(f: impl FnOnce(&mut Broken)) -> Broken {
    let mut b = Broken::none();
    f(&mut b);
    b
}

/// The deliberately broken variants, each with one rule off.
fn mutants() -> Vec<(&'static str, Broken)> {
    vec![
        ("repair_before_read_quorum", mutant(|b| b.repair_before_read_quorum = true)),
        ("open_in_the_promised_epoch", mutant(|b| b.open_in_the_promised_epoch = true)),
        ("blank_replicas_vote", mutant(|b| b.blank_replicas_vote = true)),
        ("epoch_block_checksum", mutant(|b| b.epoch_block_checksum = true)),
        ("reconnect_beside_the_thread", mutant(|b| b.reconnect_beside_the_thread = true)),
        ("compare_pad_filler", mutant(|b| b.compare_pad_filler = true)),
        ("sync_flush_visibility", mutant(|b| b.sync_flush_visibility = true)),
        ("ack_before_flush", mutant(|b| b.ack_before_flush = true)),
        ("tail_any_epoch", mutant(|b| b.tail_any_epoch = true)),
        ("commit_word_ahead", mutant(|b| b.commit_word_ahead = true)),
        ("sleep_without_repoll", mutant(|b| b.sleep_without_repoll = true)),
        ("kept_history_unflushed", mutant(|b| b.kept_history_unflushed = true)),
        ("fence_keeps_connection", mutant(|b| b.fence_keeps_connection = true)),
    ]
}

/// The mutants whose loss the simulator's plans do not reach within a mutant's budget (none in
/// 4000 to 7800 seeds each), with the test that catches each instead: a tail of any epoch needs
/// a fenced writer's records at the positions and lsns that follow a later writer's history on a
/// replica, then a cut that keeps them and loses that writer's (`crash_failover.rs` builds it and
/// catches it); the pad filler's comparison loses an entry only where it lowers a replica's commit
/// word above records of an older epoch than its own, in a repair cut short, on a replica that is
/// one of the last `q` holding them (`writer/compare_tests.rs` catches the comparison itself);
/// a sleeping writer that sleeps again without polling after re-arming (6705 seeds) loses no
/// entry and no replica: the completion it slept past holds its sync until the timeout, and the
/// poll after it finds the completion (tests/wait.rs catches the sync that lasted its timeout);
/// a blank replica's vote loses an entry only after about seven faults in a row (two replicas
/// restarting blank around partitions and a writer's kill): the plans reach it, at seed 6410
/// after 288 s, too late for the budget (`safety.rs`, `a_replica_that_lost_its_memory_does_not_
/// vote`, builds the history and catches it; `SIM_MUTANT_SECS=900 scripts/sim.sh` hunts it).
const NOT_REACHED: [&str; 4] = ["tail_any_epoch", "compare_pad_filler", "sleep_without_repoll", "blank_replicas_vote"];

fn main() {
    let args = Arguments::from_args();
    let max = env_u64("SIM_MUTANT_SEEDS", 20_000);
    let mut trials = vec![Trial::test("simulate", simulate)];
    for (name, b) in mutants().into_iter().filter(|(n, _)| !NOT_REACHED.contains(n)) {
        // Run by scripts/sim.sh (`--include-ignored`): each takes up to a minute.
        trials.push(Trial::test(format!("catches_{name}"), move || catches(name, b, max)).with_ignored_flag(true));
    }
    trials.push(
        Trial::test("replay", || {
            let seed = env_u64("SIM_SEED", 0);
            let broken = std::env::var("SIM_BROKEN").map_or_else(
                |_| Broken::none(),
                |name| mutants().into_iter().find(|(n, _)| *n == name).map_or_else(Broken::none, |(_, b)| b),
            );
            let (mut cfg, plan) = draw(seed, broken);
            // SIM_CONTROL: the mutant's configuration and plan with every rule on (a mutant's
            // catch is its own only if this run has no violation).
            let control = std::env::var_os("SIM_CONTROL").is_some();
            if control {
                cfg.broken = Broken::none();
            }
            let o = run(seed, &cfg, &plan);
            println!("seed {seed}: {cfg:?}\n{} steps, {} acknowledged, {} recoveries", o.steps, o.acked, o.recoveries);
            for h in &o.history {
                println!("  {h}");
            }
            if o.violations.is_empty() {
                Ok(())
            } else if control {
                Err(format!("control run, every rule on: {:?}", o.violations).into())
            } else {
                Err(report(seed, broken, Duration::from_secs(120)).into())
            }
        })
        .with_ignored_flag(std::env::var_os("SIM_SEED").is_none()),
    );
    libtest_mimic::run(&args, trials).exit();
}
