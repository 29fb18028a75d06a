//! The deterministic simulation (`rpma_mock::sim`): a seed replays the same history, the
//! clock jumps over waits, and partitions, power cuts and kills act where a step puts them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rpma_core::{CompletionFlags, ConnEvent, ContextType, Device, Ep, FlushType, MrRemote, Peer, Usage};
use rpma_core::{ConnReq, ErrorKind};
use rpma_mock::sim::Sim;
use rpma_mock::{Direction, MockFabric, PersistentMemory, Unflushed};

const A: &str = "10.0.0.1";
const B: &str = "10.0.0.2";

fn fabric(sim: &Sim) -> MockFabric {
    MockFabric::builder()
        .device("a", &[A])
        .device("b", &[B])
        .persistent_memory(PersistentMemory::All)
        .cm_timeout(Duration::from_millis(5))
        .simulation(sim)
        .build()
}

fn peer(f: &MockFabric, ip: &str) -> Peer<MockFabric> {
    Peer::new(&Device::lookup(f, ip, ContextType::Local).unwrap()).unwrap()
}

/// A server that accepts one connection with a region, and a client that writes 8 bytes of
/// each of `rounds` into it, flushes and polls with the runtime's pause; what each saw.
fn ping(seed: u64, rounds: u64) -> (Vec<String>, Vec<u64>) {
    let sim = Sim::new(seed);
    let f = fabric(&sim);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let fs = f.clone();
    let server = sim
        .spawn("server", move || {
            let p = peer(&fs, B);
            let ep = Ep::listen(&p, B, "7000").unwrap();
            let mr = p.alloc_mr(64, Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY).unwrap();
            let req = ep.next_conn_req_timeout(None, Duration::from_secs(1)).unwrap();
            let conn = req.connect(Some(&mr.descriptor())).unwrap();
            assert_eq!(conn.next_event().unwrap(), ConnEvent::Established);
            // Until the client goes.
            let _ = conn.next_event_timeout(Duration::from_secs(10));
        })
        .unwrap();
    let fc = f;
    let s2 = Arc::clone(&seen);
    let client = sim
        .spawn("client", move || {
            let p = peer(&fc, A);
            let rt = p.runtime();
            let src = p.alloc_mr(8, Usage::WRITE_SRC).unwrap();
            let conn = loop {
                let c = ConnReq::new(&p, B, "7000", None).unwrap().connect(None).unwrap();
                match c.next_event_timeout(Duration::from_millis(2)) {
                    Ok(ConnEvent::Established) => break c,
                    _ => rt.park(Some(rt.now() + Duration::from_micros(500))),
                }
            };
            let remote = MrRemote::from_descriptor(conn.private_data()).unwrap();
            for k in 0..rounds {
                src.write(0, &k.to_le_bytes()).unwrap();
                conn.write(remote.at(8 * (k as usize % 8)), src.slice(0..8))
                    .flags(CompletionFlags::ON_ERROR)
                    .post()
                    .unwrap();
                conn.flush(remote.slice(0..64), FlushType::Visibility).context(k).post().unwrap();
                let deadline = rt.now() + Duration::from_secs(1);
                loop {
                    if let Some(wc) = conn.cq().next_wc().unwrap() {
                        s2.lock().unwrap().push(wc.wr_id());
                        break;
                    }
                    assert!(rt.now() < deadline, "no completion");
                    rt.pause(deadline);
                }
            }
            conn.disconnect().unwrap();
        })
        .unwrap();
    assert!(sim.run_until(100_000, || sim.is_done(server) && sim.is_done(client)), "{:#?}", sim.trace());
    assert!(sim.panics().is_empty(), "{:?}", sim.panics());
    let seen = seen.lock().unwrap().clone();
    (sim.trace(), seen)
}

#[test]
fn a_seed_replays_the_same_history_and_another_seed_another() {
    let (t1, s1) = ping(7, 20);
    let (t2, s2) = ping(7, 20);
    assert_eq!(s1, (0..20).collect::<Vec<_>>());
    assert_eq!(s1, s2);
    assert_eq!(t1, t2, "the same seed took other steps");
    let (t3, _) = ping(8, 20);
    assert_ne!(t1, t3, "another seed took the same steps");
    assert!(t1.iter().any(|l| l.contains("client: poll")), "{t1:#?}");
    assert!(t1.iter().any(|l| l.contains("Write of 8 bytes")), "{t1:#?}");
}

#[test]
fn the_clock_jumps_over_a_wait_nothing_ends() {
    let sim = Sim::new(1);
    let f = fabric(&sim);
    let a = sim
        .spawn("waiter", move || {
            let p = peer(&f, A);
            let _ep = Ep::listen(&p, A, "7001").unwrap();
            let e = _ep.next_conn_req_timeout(None, Duration::from_secs(30)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::NoEvent);
        })
        .unwrap();
    assert!(sim.run_until(1000, || sim.is_done(a)), "{:#?}", sim.trace());
    assert!(sim.elapsed() >= Duration::from_secs(30), "{:?}", sim.elapsed());
    assert!(sim.steps() < 100, "{} steps for one wait", sim.steps());
    assert!(sim.panics().is_empty(), "{:?}", sim.panics());
}

#[test]
fn a_partition_stops_connections_and_healing_lets_them_through() {
    let sim = Sim::new(3);
    let f = fabric(&sim);
    let (da, db) = (f.devices()[0].clone(), f.devices()[1].clone());
    f.partition(&da, &db, Direction::Both).unwrap();
    let fs = f.clone();
    let _server = sim
        .spawn("server", move || {
            let p = peer(&fs, B);
            let ep = Ep::listen(&p, B, "7002").unwrap();
            loop {
                if let Ok(req) = ep.next_conn_req_timeout(None, Duration::from_millis(1)) {
                    let c = req.connect(None).unwrap();
                    let _ = c.next_event_timeout(Duration::from_secs(10));
                }
            }
        })
        .unwrap();
    let fc = f.clone();
    let outcome = Arc::new(Mutex::new(Vec::new()));
    let o = Arc::clone(&outcome);
    let client = sim
        .spawn("client", move || {
            let p = peer(&fc, A);
            for _ in 0..2 {
                let c = ConnReq::new(&p, B, "7002", None).unwrap().connect(None).unwrap();
                // Taken before the lock: no lock is held across a scheduling point.
                let ev = c.next_event_timeout(Duration::from_millis(3)).ok();
                o.lock().unwrap().push(ev);
                p.runtime().park(Some(p.runtime().now() + Duration::from_millis(10)));
            }
        })
        .unwrap();
    // The first attempt, partitioned: no answer within its timeout.
    assert!(sim.run_until(100_000, || outcome.lock().unwrap().len() == 1));
    f.heal_all();
    assert!(sim.run_until(100_000, || sim.is_done(client)), "{:#?}", sim.trace());
    assert_eq!(*outcome.lock().unwrap(), vec![None, Some(ConnEvent::Established)]);
    assert_eq!(f.connections(), 0, "the client's connection ended with it");
    assert!(sim.finish(100_000));
    assert!(sim.panics().is_empty(), "{:?}", sim.panics());
}

#[test]
fn a_killed_actor_unwinds_and_its_connections_close() {
    let sim = Sim::new(4);
    let f = fabric(&sim);
    let fs = f.clone();
    let events = Arc::new(Mutex::new(Vec::new()));
    let ev = Arc::clone(&events);
    let server = sim
        .spawn("server", move || {
            let p = peer(&fs, B);
            let ep = Ep::listen(&p, B, "7003").unwrap();
            let req = ep.next_conn_req_timeout(None, Duration::from_secs(1)).unwrap();
            let c = req.connect(None).unwrap();
            loop {
                if let Ok(e) = c.next_event_timeout(Duration::from_secs(1)) {
                    ev.lock().unwrap().push(e);
                }
            }
        })
        .unwrap();
    let fc = f.clone();
    let client = sim
        .spawn("client", move || {
            let p = peer(&fc, A);
            let c = ConnReq::new(&p, B, "7003", None).unwrap().connect(None).unwrap();
            assert_eq!(c.next_event_timeout(Duration::from_secs(1)).unwrap(), ConnEvent::Established);
            loop {
                p.runtime().park(None);
            }
        })
        .unwrap();
    assert!(sim.run_until(100_000, || f.connections() == 1));
    sim.kill(client);
    assert!(sim.run_until(100_000, || sim.is_done(client)));
    assert!(sim.run_until(100_000, || events.lock().unwrap().len() == 2), "{:?}", events.lock().unwrap());
    assert_eq!(*events.lock().unwrap(), vec![ConnEvent::Established, ConnEvent::Closed]);
    assert!(!sim.is_done(server));
    assert!(sim.finish(100_000));
    assert!(sim.panics().is_empty(), "{:?}", sim.panics());
}

#[test]
fn a_power_cut_between_a_store_and_its_persist_tears_at_eight_bytes() {
    // The owner stores 64 bytes and persists them; the cut falls at the persist's scheduling
    // point, before the write-back: with the 8-byte torn policy some words are new, some old.
    let mut mixed = 0;
    for seed in 0..16 {
        let sim = Sim::new(seed);
        let f = fabric(&sim);
        let fs = f.clone();
        let owner = sim
            .spawn("owner", move || {
                let p = peer(&fs, B);
                let mr = p.alloc_mr(64, Usage::WRITE_DST | Usage::FLUSH_TYPE_PERSISTENT).unwrap();
                mr.volatile().fill(0xFF);
                let _ = mr.persist(0, 64);
                loop {
                    p.runtime().park(None);
                }
            })
            .unwrap();
        assert!(sim.run_until(1000, || sim.trace().iter().any(|l| l.contains("owner: persist"))));
        let cut = f.power_cut_with(&f.devices()[1], Unflushed::Torn { seed }).unwrap();
        let bytes = cut.regions()[0].memory().to_vec();
        for w in bytes.chunks(8) {
            assert!(w.iter().all(|&b| b == w[0]), "a word torn inside: {w:?}");
        }
        if bytes.contains(&0) && bytes.contains(&0xFF) {
            mixed += 1;
        }
        sim.kill(owner);
        assert!(sim.finish(1000));
    }
    assert!(mixed > 0, "no cut left old and new words side by side");
}
