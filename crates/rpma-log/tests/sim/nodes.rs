//! The processes of the cluster, each an actor of the simulation: a replica (the real
//! `Replica` serving its region), a writer (the real `Log`, doing what its seed says and
//! reporting to the checker), and the writer of the calm.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rpma::mock::sim::ActorId;
use rpma::mock::{Device, MockFabric};
use rpma::{ContextType, Memory};
use rpma_log::{Health, Log, LogError, LogOptions, Replica, ReplicaAddr, ReplicaOptions};

use crate::downs::Downs;
use crate::plan::{Config, Node};
use crate::world::{lock, replica_ip, writer_ip, Shared};

const LOG_ID: u64 = 0x51_4D00;
const PORT: &str = "7600";

/// Starts replica `r`'s process on `memory` (opened) or a fresh region: formatted for the new
/// log (the first start), or as a blank replacement (a restart that lost its memory). A region
/// that kept its memory must pass the offline check and open: a persistent log whose replica
/// refuses its own region after a crash has lost what it held.
pub fn spawn_replica(
    shared: &Arc<Shared>,
    fabric: &MockFabric,
    cfg: &Config,
    r: usize,
    memory: Option<Memory>,
    blank: &Arc<AtomicBool>,
    first: bool,
) -> Option<ActorId> {
    let must_open = memory.is_some();
    let founding = first;
    let sh = Arc::clone(shared);
    let f = fabric.clone();
    let flag = Arc::clone(blank);
    let broken = cfg.broken;
    let (ring, junk_seed) = (cfg.ring, cfg.junk);
    shared
        .sim
        .spawn(&format!("r{r}"), move || {
            let ip = replica_ip(r);
            let Ok(dev) = Device::lookup(&f, &ip, ContextType::Local) else { return };
            let Ok(peer) = rpma::mock::Peer::new(&dev) else { return };
            let replica = match memory {
                Some(m) => {
                    // The commit word names only records durable there: what a crash kept
                    // passes the offline check (its committed records whole).
                    if let Err(e) = rpma_log::check_region(&m.to_vec()) {
                        sh.violation(format!("r{r}: what a crash kept fails its check: {e}"));
                    }
                    Replica::open(&peer, m, LOG_ID)
                }
                None => Memory::page_aligned(rpma_log::HEADER_SIZE + ring).map_err(LogError::from).and_then(|m| {
                    // A fresh region holds whatever the memory held before: bytes of the node's
                    // own, never a valid record (which no recovery may take for one).
                    let mut junk = fastrand::Rng::with_seed(junk_seed ^ (r as u64 + 1).wrapping_mul(0x9E37_79B9));
                    let bytes: Vec<u8> = (0..m.len()).map(|_| junk.u8(..)).collect();
                    m.volatile().write(0, &bytes)?;
                    if founding {
                        Replica::format(&peer, m, LOG_ID)
                    } else {
                        Replica::format_replacement(&peer, m, LOG_ID)
                    }
                }),
            };
            let replica = match replica {
                Ok(x) => x,
                Err(e) => {
                    if must_open {
                        sh.violation(format!("r{r}: its region is refused after a crash that kept its memory: {e}"));
                    }
                    return;
                }
            };
            let opts = ReplicaOptions::default().with_poll_interval(Duration::from_millis(1)).with_broken(broken);
            let Ok(mut replica) = replica.with_options(opts).listen(&ip, PORT) else { return };
            loop {
                if let Err(e) = replica.serve_once(Duration::from_millis(1)) {
                    // A replica ends when its node loses power (it is killed then, before it
                    // sees the error); any other end leaves the log a replica short for good.
                    sh.violation(format!("r{r} stopped serving: {e}"));
                    return;
                }
                if let Ok(st) = replica.state() {
                    if sh.promised[r].swap(st.promised, Ordering::AcqRel) != st.promised {
                        sh.touch(Node::Replica(r));
                    }
                    if st.joined {
                        flag.store(false, Ordering::Release);
                    }
                }
            }
        })
        .ok()
}

fn options(cfg: &Config, id: u64) -> LogOptions {
    LogOptions::new(LOG_ID)
        .quorum(cfg.quorum)
        .flush(cfg.flush)
        .timeout(Duration::from_millis(4))
        .writer_id(id)
        .reconnect_in_background(cfg.background)
        .wait(cfg.wait)
        .reconnect_backoff(Duration::from_micros(200), Duration::from_millis(3))
        .broken(cfg.broken)
}

fn set(cfg: &Config) -> Vec<ReplicaAddr> {
    (0..cfg.n).map(|r| ReplicaAddr::new(&replica_ip(r), PORT)).collect()
}

/// Starts writer `w`'s process (its `generation`-th): it opens the log and does what its seed
/// says (appends, syncs, truncations, reconnects, pauses, closes), reporting to the checker.
pub fn spawn_writer(
    shared: &Arc<Shared>,
    fabric: &MockFabric,
    cfg: &Config,
    seed: u64,
    w: usize,
    generation: u64,
) -> Option<ActorId> {
    let sh = Arc::clone(shared);
    let f = fabric.clone();
    let cfg = cfg.clone();
    let name = format!("w{w}.{generation}");
    shared.sim.spawn(&name.clone(), move || writer(&sh, &f, &cfg, seed, w, generation, &name)).ok()
}

fn writer(sh: &Shared, f: &MockFabric, cfg: &Config, seed: u64, w: usize, generation: u64, name: &str) {
    let Ok(dev) = Device::lookup(f, &writer_ip(w), ContextType::Local) else { return };
    let Ok(peer) = rpma::mock::Peer::new(&dev) else { return };
    let rt = peer.runtime();
    let mut rng = fastrand::Rng::with_seed(seed ^ (w as u64) << 32 ^ generation << 48 ^ 0x3717E);
    let id = if cfg.same_id { 7 } else { 100 + w as u64 };
    let mut counter = 0u64;
    let mut downs = Downs::new();
    loop {
        let began = lock(&sh.checker).before_open();
        let began_at = rt.now();
        let (mut log, report) = match Log::open(&peer, &set(cfg), options(cfg, id)) {
            Ok(x) => x,
            Err(e) => {
                sh.note(format!("{name}: open failed: {}", short(&e)));
                rt.park(Some(rt.now() + Duration::from_micros(rng.u64(..3000))));
                continue;
            }
        };
        sh.note(format!(
            "{name}: opened in epoch {}, history {}..{} from r{:?}, repaired {:?}",
            report.epoch, report.head_lsn, report.next_lsn, report.source, report.repaired
        ));
        let mut reported = report.head_lsn;
        {
            let mut c = lock(&sh.checker);
            c.recovered(name, &log, &report, began);
            c.synced(name, &log, reported, log.durable_lsn());
        }
        reported = reported.max(log.durable_lsn());
        downs.opened(&mut log, began_at);
        loop {
            downs.look(sh, &mut log, name, w);
            match rng.u8(..20) {
                0..=7 => {
                    for _ in 0..1 + rng.usize(..4) {
                        counter += 1;
                        let mut p = format!("w{w}#{generation}.{counter}|").into_bytes();
                        let len = cfg.entry_len.map_or_else(|| p.len() + rng.usize(..120), |n| n.max(p.len()));
                        p.extend((p.len()..len).map(|_| rng.u8(..)));
                        match log.append(&p) {
                            Ok(lsn) => lock(&sh.checker).appended(lsn, &p),
                            Err(LogError::Full { .. }) => {
                                let to = log.durable_lsn();
                                lock(&sh.checker).truncating(to);
                                let r = log.truncate_prefix(to);
                                sh.note(format!(
                                    "{name}: full, truncate below {to}: {}",
                                    r.map_or_else(|e| short(&e), |()| "ok".into())
                                ));
                                break;
                            }
                            Err(e) => {
                                sh.note(format!("{name}: append failed: {}", short(&e)));
                                break;
                            }
                        }
                    }
                }
                8..=11 => match log.sync_all() {
                    Ok(d) => {
                        lock(&sh.checker).synced(name, &log, reported, d);
                        if d > reported {
                            sh.note(format!("{name}: synced below {d}"));
                        }
                        reported = reported.max(d);
                    }
                    Err(e) => {
                        sh.note(format!("{name}: sync failed: {}", short(&e)));
                        match rng.u8(..4) {
                            0 | 1 => break,
                            // A user who reconnects what went down at once (beside the reconnect
                            // thread, if it runs, which was told too).
                            2 => {
                                for r in 0..cfg.n {
                                    if log.health()[r] == Health::Down {
                                        if let Err(e) = log.reconnect(r) {
                                            sh.note(format!("{name}: reconnect r{r} failed: {}", short(&e)));
                                        }
                                    }
                                }
                            }
                            _ => {}
                        }
                    }
                },
                12 => {
                    let (h, d) = (log.head_lsn(), log.durable_lsn());
                    if d > h {
                        let to = h + rng.u64(..=d - h);
                        lock(&sh.checker).truncating(to);
                        let r = log.truncate_prefix(to);
                        sh.note(format!(
                            "{name}: truncate below {to}: {}",
                            r.map_or_else(|e| short(&e), |()| "ok".into())
                        ));
                    }
                }
                13 => {
                    let back = log.maintain();
                    if !back.is_empty() {
                        sh.note(format!("{name}: maintain brought back {back:?}"));
                    }
                }
                14 | 15 if cfg.background || rng.bool() => {
                    // A replica that is down, if any: the one a user reconnects.
                    let down: Vec<usize> = (0..cfg.n).filter(|&r| log.health()[r] == Health::Down).collect();
                    let r = if down.is_empty() { rng.usize(..cfg.n) } else { down[rng.usize(..down.len())] };
                    if let Err(e) = log.reconnect(r) {
                        sh.note(format!("{name}: reconnect r{r} failed: {}", short(&e)));
                    }
                }
                14 | 15 => log.refresh_health(),
                16 | 17 => rt.park(Some(rt.now() + Duration::from_micros(rng.u64(..2000)))),
                18 => {
                    if rng.u8(..4) == 0 {
                        sh.note(format!("{name}: closes the log"));
                        break;
                    }
                }
                _ => {
                    let next = log.next_lsn();
                    if next > log.durable_lsn() {
                        let upto = log.durable_lsn() + rng.u64(..next - log.durable_lsn());
                        if let Ok(d) = log.sync(upto) {
                            lock(&sh.checker).synced(name, &log, reported, d);
                            reported = reported.max(d);
                        }
                    }
                }
            }
        }
        drop(log);
    }
}

/// The writer of the calm: opens (again until it can), appends one entry and syncs it.
pub fn final_writer(sh: &Shared, f: &MockFabric, cfg: &Config, done: &AtomicBool) {
    let name = "final";
    let Ok(dev) = Device::lookup(f, &writer_ip(cfg.writers), ContextType::Local) else { return };
    let Ok(peer) = rpma::mock::Peer::new(&dev) else { return };
    let rt = peer.runtime();
    loop {
        let began = lock(&sh.checker).before_open();
        let (mut log, report) = match Log::open(&peer, &set(cfg), options(cfg, 999)) {
            Ok(x) => x,
            Err(e) => {
                sh.note(format!("{name}: open failed: {}", short(&e)));
                rt.park(Some(rt.now() + Duration::from_millis(1)));
                continue;
            }
        };
        sh.note(format!("{name}: opened in epoch {}, history {}..{}", report.epoch, report.head_lsn, report.next_lsn));
        {
            let mut c = lock(&sh.checker);
            c.recovered(name, &log, &report, began);
            c.synced(name, &log, report.head_lsn, log.durable_lsn());
        }
        let p = b"final|".to_vec();
        if let Err(LogError::Full { .. }) = log.append(&p) {
            let to = log.durable_lsn();
            lock(&sh.checker).truncating(to);
            let _ = log.truncate_prefix(to);
            continue;
        }
        let lsn = log.next_lsn() - 1;
        lock(&sh.checker).appended(lsn, &p);
        match log.sync_all() {
            Ok(d) => {
                lock(&sh.checker).synced(name, &log, report.head_lsn, d);
                sh.note(format!("{name}: synced below {d}"));
                done.store(true, Ordering::Release);
                loop {
                    rt.park(None);
                }
            }
            Err(e) => sh.note(format!("{name}: sync failed: {}", short(&e))),
        }
    }
}

fn short(e: &LogError) -> String {
    let s = e.to_string();
    if s.len() > 160 {
        format!("{}...", &s[..s.char_indices().nth(160).map_or(s.len(), |(i, _)| i)])
    } else {
        s
    }
}
