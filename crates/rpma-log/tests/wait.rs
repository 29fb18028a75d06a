//! The writer sleeping on its replicas' completion channels (`Wait::Sleep`) on a simulated
//! fabric, where the interleaving of the writer's polls with the replicas' completions is drawn
//! from a seed: a sleeping writer whose replicas all answer never waits for its deadline (a
//! completion it slept past would hold its sync until then). tests/log_sleep.rs runs the log's
//! behaviour tests with a sleeping writer in real time.

mod common;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use common::{addrs, builder, payload, replica_ip, writer_peer, LOG_ID, PORT};
use rpma::mock::sim::Sim;
use rpma::mock::Device;
use rpma::{ContextType, Memory};
use rpma_log::{Broken, FlushMode, Health, Log, LogOptions, Quorum, Replica, ReplicaOptions, Wait};

/// The simulated writer's timeout: a sync that waited for it stands out from every other.
const SIM_TIMEOUT: Duration = Duration::from_secs(1);
const SIM_SYNCS: u64 = 30;
const SIM_SEEDS: u64 = 40;

/// Seed `seed` on a simulated fabric: a writer sleeping (with the rules `broken` off) appends
/// and syncs `SIM_SYNCS` entries on three replicas that all answer, a quorum of all; the
/// longest sync in virtual time, or what failed.
fn longest_sync(seed: u64, broken: Broken) -> Result<Duration, String> {
    let sim = Sim::new(seed);
    let fabric = builder(3).seed(seed).simulation(&sim).build();
    for r in 0..3 {
        let f = fabric.clone();
        sim.spawn(&format!("r{r}"), move || {
            let ip = replica_ip(r);
            let Ok(dev) = Device::lookup(&f, &ip, ContextType::Local) else { return };
            let Ok(peer) = rpma::mock::Peer::new(&dev) else { return };
            let Ok(m) = Memory::page_aligned(64 * 1024) else { return };
            let opts = ReplicaOptions::default().with_poll_interval(Duration::from_millis(1));
            let Ok(mut replica) =
                Replica::format(&peer, m, LOG_ID).and_then(|r| r.with_options(opts).listen(&ip, PORT))
            else {
                return;
            };
            while replica.serve_once(Duration::from_millis(1)).is_ok() {}
        })
        .map_err(|e| e.to_string())?;
    }
    let outcome: Arc<Mutex<Option<Result<Duration, String>>>> = Arc::default();
    let out = Arc::clone(&outcome);
    let f = fabric;
    sim.spawn("writer", move || {
        let peer = writer_peer(&f);
        let rt = peer.runtime();
        let opts = LogOptions::new(LOG_ID)
            .quorum(Quorum::All)
            .flush(FlushMode::Visibility)
            .timeout(SIM_TIMEOUT)
            .wait(Wait::Sleep)
            .broken(broken);
        let r = (|| {
            // The replicas may not listen yet: the writer tries again for 100 ms.
            let mut tries = 0;
            let (mut log, _) = loop {
                match Log::open(&peer, &addrs(3), opts.clone()) {
                    Ok(x) => break x,
                    Err(e) if tries == 100 => return Err(format!("open: {e}")),
                    Err(_) => tries += 1,
                }
                rt.park(Some(rt.now() + Duration::from_millis(1)));
            };
            let mut longest = Duration::ZERO;
            for k in 0..SIM_SYNCS {
                log.append(&payload(k)).map_err(|e| format!("append: {e}"))?;
                let t = rt.now();
                log.sync_all().map_err(|e| format!("sync {k}: {e}"))?;
                longest = longest.max(rt.now() - t);
            }
            if log.health() != [Health::Up; 3] {
                return Err(format!("health {:?}: {:?}", log.health(), log.health_events()));
            }
            Ok(longest)
        })();
        *out.lock().unwrap_or_else(PoisonError::into_inner) = Some(r);
    })
    .map_err(|e| e.to_string())?;
    let done = || outcome.lock().unwrap_or_else(PoisonError::into_inner).is_some();
    sim.run_until(5_000_000, done);
    sim.finish(1_000_000);
    let r = outcome.lock().unwrap_or_else(PoisonError::into_inner).take();
    r.unwrap_or_else(|| Err(format!("the writer did not finish (panics: {:?})", sim.panics())))
}

#[test]
fn a_sleeping_writer_misses_no_completion_on_a_simulated_fabric() {
    for seed in 0..SIM_SEEDS {
        let longest = longest_sync(seed, Broken::none()).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert!(longest < SIM_TIMEOUT / 10, "seed {seed}: a sync took {longest:?} (timeout {SIM_TIMEOUT:?})");
    }
}

/// The check above can fail: with the poll after the re-arming left out, a completion that came
/// between the writer's last poll and the re-arming raises no event, and some seed's sync waits
/// until its deadline.
#[test]
fn without_the_poll_after_re_arming_a_sleeping_writer_waits_for_its_deadline() {
    let mut broken = Broken::none();
    broken.sleep_without_repoll = true;
    let caught = (0..SIM_SEEDS).find(|&seed| match longest_sync(seed, broken) {
        Ok(longest) => longest >= SIM_TIMEOUT,
        Err(e) => panic!("seed {seed}: {e}"),
    });
    assert!(caught.is_some(), "no seed of 0..{SIM_SEEDS} waited for its deadline");
}

/// A replica gone silent (the mock's silent link: as rxe sees a node without power, no error
/// completion and no event, its work unanswered) on the real clock. A sleeping writer with a
/// majority quorum goes on with the two others without waiting for it; with a quorum of all,
/// its sync sleeps until the timeout and fails naming that replica. Healed, the replica
/// completes what waited, and the next sync of all succeeds.
#[test]
fn a_sleeping_writer_and_a_silent_replica() {
    const TIMEOUT: Duration = Duration::from_millis(300);
    let fabric = builder(3).mode(rpma::mock::Mode::Deferred).build();
    let _handles: Vec<_> = (0..3).map(|i| common::start(&fabric, i, None, 64 * 1024).unwrap()).collect();
    let (writer, silent) = (fabric.devices()[0].clone(), fabric.devices()[3].clone());
    let opts = |q| LogOptions::new(LOG_ID).quorum(q).flush(FlushMode::Visibility).timeout(TIMEOUT).wait(Wait::Sleep);

    let (mut log, _) = Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::Majority)).unwrap();
    assert_eq!(fabric.silence(&writer, &silent).unwrap(), 1);
    for lsn in 0..20 {
        log.append(&payload(lsn)).unwrap();
        let t = Instant::now();
        assert_eq!(log.sync(lsn).unwrap(), lsn + 1);
        assert!(t.elapsed() < TIMEOUT / 2, "sync {lsn} waited {:?} for the silent replica", t.elapsed());
    }
    assert_eq!(log.durable_on(2), 0, "the silent replica completed something");
    assert_ne!(log.health()[2], Health::Down, "nothing told the writer the replica went silent");
    fabric.heal(&writer, &silent);
    drop(log);

    let (mut log, _) = Log::open(&writer_peer(&fabric), &addrs(3), opts(Quorum::All)).unwrap();
    let lsn = log.append(&payload(20)).unwrap();
    assert_eq!(log.sync(lsn).unwrap(), lsn + 1);
    fabric.silence(&writer, &silent).unwrap();
    let lsn = log.append(&payload(21)).unwrap();
    let t = Instant::now();
    let e = log.sync(lsn).unwrap_err();
    let waited = t.elapsed();
    assert!(e.to_string().contains(&format!("{}:{PORT}: sync not completed", replica_ip(2))), "{e}");
    assert!(waited >= TIMEOUT && waited < TIMEOUT * 4, "the sync failed after {waited:?}, its timeout is {TIMEOUT:?}");
    fabric.heal(&writer, &silent);
    assert_eq!(log.sync(lsn).unwrap(), lsn + 1);
    assert_eq!(log.durable_on(2), lsn + 1);
}
