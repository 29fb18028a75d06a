//! The persistence model (docs/persistence.md): what makes bytes durable, what does not, the
//! three policies for bytes not made durable, a reboot from the returned memory, crash points,
//! and the bad inputs. Each case runs in the immediate and the deferred mode where both apply.

use super::*;

use rpma::mock::{CrashPoints, MockFabricBuilder, Mode, PersistentMemory, PowerCut, Unflushed};
use rpma::PeerCfg;

const WRITER: &str = "10.0.0.1";
const REPLICA: &str = "10.0.0.2";
const LEN: usize = 4096;
const MODES: [Mode; 2] = [Mode::Immediate, Mode::Deferred];

fn builder(mode: Mode) -> MockFabricBuilder {
    MockFabric::builder()
        .device("writer", &[WRITER])
        .device("replica", &[REPLICA])
        .mode(mode)
        .background_progress(None)
        .persistent_memory(PersistentMemory::All)
}

/// A writer connected to a replica whose `log` (persistent, `WRITE_DST | READ_SRC | FLUSH_TYPES`)
/// it writes from `src`; the replica's peer configuration (direct write to pmem) is applied
/// when `dwtp`.
struct Rig {
    f: MockFabric,
    rpeer: Peer,
    log: MrLocal,
    src: MrLocal,
    writer: Conn,
    replica: Conn,
    remote: MrRemote,
    _ep: Ep,
    _wpeer: Peer,
}

fn rig_on(f: MockFabric, port: &str, dwtp: bool) -> Rig {
    let rpeer = Peer::new(&Device::lookup(&f, REPLICA, ContextType::Local).unwrap()).unwrap();
    let log = rpeer.alloc_mr(LEN, Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPES).unwrap();
    let ep = Ep::listen(&rpeer, REPLICA, port).unwrap();
    let wpeer = Peer::new(&Device::lookup(&f, REPLICA, ContextType::Remote).unwrap()).unwrap();
    let src = wpeer.alloc_mr(LEN, Usage::WRITE_SRC | Usage::READ_DST).unwrap();
    let writer = ConnReq::new(&wpeer, REPLICA, port, None).unwrap().connect(None).unwrap();
    let mut pdata = log.descriptor().to_vec();
    pdata.extend_from_slice(&PeerCfg::new().with_direct_write_to_pmem(true).descriptor());
    let replica = ep.next_conn_req(None).unwrap().connect(Some(&pdata)).unwrap();
    nonblock(writer.event_fd());
    nonblock(replica.event_fd());
    assert_eq!(next_event(&writer), ConnEvent::Established);
    assert_eq!(next_event(&replica), ConnEvent::Established);
    let remote = MrRemote::from_descriptor(&writer.private_data()[..MrRemote::DESCRIPTOR_SIZE]).unwrap();
    if dwtp {
        writer.apply_remote_peer_cfg(
            &PeerCfg::from_descriptor(&writer.private_data()[MrRemote::DESCRIPTOR_SIZE..]).unwrap(),
        );
    }
    Rig { f, rpeer, log, src, writer, replica, remote, _ep: ep, _wpeer: wpeer }
}

fn rig(mode: Mode) -> Rig {
    rig_on(builder(mode).build(), "7300", true)
}

impl Rig {
    /// Writes `bytes` at `off` of the log and waits for the write's completion.
    fn write(&self, off: usize, bytes: &[u8]) {
        self.src.write(off, bytes).unwrap();
        self.writer.write(self.remote.at(off), self.src.slice(off..off + bytes.len())).context(1).post().unwrap();
        assert_eq!(next_wc(self.writer.cq()).status(), WcStatus::Success);
    }

    /// Flushes `[off, off + len)` of the log and waits for the flush's completion.
    fn flush(&self, off: usize, len: usize, t: FlushType) {
        self.writer.flush(self.remote.slice(off..off + len), t).context(2).post().unwrap();
        let wc = next_wc(self.writer.cq());
        assert_eq!((wc.wr_id(), wc.status()), (2, WcStatus::Success));
    }

    fn cut(&self) -> PowerCut {
        self.f.power_cut(self.rpeer.device().backend()).expect("power cut")
    }
}

/// The bytes of the log after the cut.
fn log_of(cut: &PowerCut) -> Vec<u8> {
    assert_eq!(cut.regions().len(), 1, "the replica had one persistent region");
    cut.regions()[0].memory().to_vec()
}

#[test]
fn power_cut__write_completion_does_not_make_durable() {
    for mode in MODES {
        let r = rig(mode);
        r.write(0, b"acknowledged, not flushed");
        // Peers see it...
        assert_eq!(r.log.to_vec(0, 5).unwrap(), b"ackno");
        // ...a power cut does not keep it.
        assert_eq!(&log_of(&r.cut())[..25], &[0; 25], "{mode:?}");
    }
}

#[test]
fn power_cut__persistent_flush_makes_durable_emulated_and_native() {
    for native in [false, true] {
        for mode in MODES {
            let r = rig_on(builder(mode).native(native, native).build(), "7301", true);
            r.write(0, b"flushed");
            r.flush(0, 7, FlushType::Persistent);
            assert_eq!(&log_of(&r.cut())[..7], b"flushed", "native {native}, {mode:?}");
        }
    }
}

#[test]
fn power_cut__read_after_writes_makes_them_durable_apm() {
    for mode in MODES {
        let r = rig(mode);
        r.write(0, b"first");
        r.write(64, b"second");
        // librpma's example 04: an RDMA Read after the writes (a target with direct write to
        // pmem persists what reached its memory).
        let dst = r._wpeer.alloc_mr(8, Usage::READ_DST).unwrap();
        r.writer.read(dst.slice(0..8), r.remote.at(0)).context(4).post().unwrap();
        assert_eq!(next_wc(r.writer.cq()).status(), WcStatus::Success);
        r.write(128, b"after the read");
        let log = log_of(&r.cut());
        assert_eq!((&log[..5], &log[64..70]), (&b"first"[..], &b"second"[..]), "{mode:?}");
        assert_eq!(&log[128..142], &[0; 14], "{mode:?}: written after the read");
    }
}

#[test]
fn power_cut__visibility_flush_does_not_make_durable() {
    for native in [false, true] {
        for mode in MODES {
            let r = rig_on(builder(mode).native(native, native).build(), "7302", true);
            r.write(0, b"visible");
            r.flush(0, 7, FlushType::Visibility);
            assert_eq!(&log_of(&r.cut())[..7], &[0; 7], "native {native}, {mode:?}");
        }
    }
}

#[test]
fn power_cut__atomic_write_needs_its_own_persistent_flush() {
    for mode in MODES {
        let r = rig(mode);
        r.writer.atomic_write(r.remote.at(8), 7u64.to_le_bytes()).context(3).post().unwrap();
        assert_eq!(next_wc(r.writer.cq()).status(), WcStatus::Success);
        r.writer.atomic_write(r.remote.at(16), 9u64.to_le_bytes()).context(3).post().unwrap();
        assert_eq!(next_wc(r.writer.cq()).status(), WcStatus::Success);
        r.flush(16, 8, FlushType::Persistent);
        let log = log_of(&r.cut());
        assert_eq!(&log[8..16], &[0; 8], "an atomic write's completion is not durability ({mode:?})");
        assert_eq!(&log[16..24], &9u64.to_le_bytes(), "{mode:?}");
    }
}

#[test]
fn power_cut__persistent_flush_without_direct_write_to_pmem_is_nosupp_and_keeps_nothing() {
    for mode in MODES {
        let r = rig_on(builder(mode).build(), "7303", false);
        r.write(0, b"data");
        let e = r.writer.flush(r.remote.slice(0..4), FlushType::Persistent).post().expect_err("no dwtp");
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
        assert_eq!(&log_of(&r.cut())[..4], &[0; 4], "{mode:?}");
    }
}

#[test]
fn power_cut__flush_covering_part_makes_only_that_part_durable() {
    for mode in MODES {
        let r = rig(mode);
        r.write(0, &[0xAB; 256]);
        r.flush(64, 64, FlushType::Persistent);
        let log = log_of(&r.cut());
        assert_eq!(&log[..64], &[0; 64], "{mode:?}");
        assert_eq!(&log[64..128], &[0xAB; 64], "{mode:?}");
        assert_eq!(&log[128..256], &[0; 128], "{mode:?}");
    }
}

#[test]
fn power_cut__flush_makes_durable_only_the_writes_posted_before_it() {
    for mode in MODES {
        let r = rig(mode);
        r.src.write(0, &[1; 16]).unwrap();
        r.src.write(16, &[2; 16]).unwrap();
        let quiet = CompletionFlags::ON_ERROR;
        r.writer.write(r.remote.at(0), r.src.slice(0..16)).flags(quiet).post().unwrap();
        r.writer.flush(r.remote.slice(0..32), FlushType::Persistent).context(5).post().unwrap();
        // Posted after the flush, over the flushed range: RC executes it after the flush.
        r.writer.write(r.remote.at(16), r.src.slice(16..32)).context(6).post().unwrap();
        assert_eq!(next_wc(r.writer.cq()).wr_id(), 5);
        assert_eq!(next_wc(r.writer.cq()).wr_id(), 6);
        assert_eq!(r.log.to_vec(0, 32).unwrap(), [[1; 16], [2; 16]].concat(), "peers see both");
        let log = log_of(&r.cut());
        assert_eq!(&log[..16], &[1; 16], "{mode:?}");
        assert_eq!(&log[16..32], &[0; 16], "{mode:?}: written after the flush");
    }
}

#[test]
fn power_cut__unflushed_kept_policy_keeps_what_peers_saw() {
    for mode in MODES {
        let r = rig_on(builder(mode).unflushed(Unflushed::Kept).build(), "7304", true);
        r.write(0, b"kept");
        assert_eq!(&log_of(&r.cut())[..4], b"kept", "{mode:?}");
    }
}

#[test]
fn power_cut__unflushed_torn_policies_tear_whole_words_or_lines_and_replay_per_seed() {
    for (policy, unit) in
        [(Unflushed::Torn { seed: 0 }, Unflushed::WORD), (Unflushed::TornLines { seed: 0 }, Unflushed::LINE)]
    {
        let torn = |seed: u64| {
            let r = rig_on(builder(Mode::Immediate).unflushed(policy.with_seed(seed)).build(), "7305", true);
            r.write(0, &[0xFF; LEN]);
            let cut = r.cut();
            assert_eq!(cut.unflushed(), policy.with_seed(seed));
            (log_of(&cut), r.log.volatile().as_ptr() as usize)
        };
        let (a, base) = torn(42);
        let (again, _) = torn(42);
        let (other, _) = torn(43);
        assert_eq!(a, again, "{policy}: the same seed tears the same units");
        assert_ne!(a, other, "{policy}: another seed tears other units");
        assert!(a.contains(&0) && a.contains(&0xFF), "{policy}: some units old, some new");
        // Units by address: every 8-byte word (64-byte line) is all old or all new.
        let first = unit - base % unit;
        let mut at = 0;
        while at < LEN {
            let n = if at == 0 { first.min(LEN) } else { unit.min(LEN - at) };
            let u = &a[at..at + n];
            assert!(u.iter().all(|&b| b == u[0]), "{policy}: the unit at {at} torn inside: {u:?}");
            at += n;
        }
    }
}

#[test]
fn power_cut__connections_lost_objects_dead_and_reboot_from_the_returned_memory() {
    for mode in MODES {
        let r = rig(mode);
        r.write(0, b"durable");
        r.flush(0, 7, FlushType::Persistent);
        r.write(7, b"-lost");
        let cut = r.cut();
        // The writer's connection is lost; its work is flushed.
        assert_eq!(next_event(&r.writer), ConnEvent::Lost);
        r.writer.write(r.remote.at(0), r.src.slice(0..4)).context(9).post().unwrap();
        assert_ne!(next_wc(r.writer.cq()).status(), WcStatus::Success, "{mode:?}");
        assert_eq!(next_event(&r.replica), ConnEvent::Lost);
        // The dead node's peer makes nothing more.
        let e = r.rpeer.alloc_mr(64, Usage::WRITE_DST).expect_err("a dead peer");
        assert_eq!(e.kind(), ErrorKind::Provider, "{e}");
        assert!(e.to_string().contains("lost power"), "{e}");
        // Reboot: a new peer on the node registers the memory that came back, on the same port.
        let memory = cut.into_regions().remove(0).into_memory();
        let rpeer = Peer::new(&Device::lookup(&r.f, REPLICA, ContextType::Local).unwrap()).unwrap();
        let log = rpeer.reg_mr(memory, Usage::READ_SRC | Usage::WRITE_DST).unwrap();
        assert_eq!(log.to_vec(0, 12).unwrap(), b"durable\0\0\0\0\0", "{mode:?}");
        let ep = Ep::listen(&rpeer, REPLICA, "7300").expect("the rebooted node listens on its old port");
        let wpeer = Peer::new(&Device::lookup(&r.f, REPLICA, ContextType::Remote).unwrap()).unwrap();
        let dst = wpeer.alloc_mr(64, Usage::READ_DST).unwrap();
        let c = ConnReq::new(&wpeer, REPLICA, "7300", None).unwrap().connect(None).unwrap();
        let s = ep.next_conn_req(None).unwrap().connect(Some(&log.descriptor())).unwrap();
        assert_eq!(c.next_event().unwrap(), ConnEvent::Established);
        let rr = MrRemote::from_descriptor(c.private_data()).unwrap();
        c.read(dst.slice(0..7), rr.at(0)).context(1).post().unwrap();
        assert_eq!(next_wc(c.cq()).status(), WcStatus::Success);
        assert_eq!(dst.to_vec(0, 7).unwrap(), b"durable");
        drop((c, s));
    }
}

#[test]
fn power_cut__bad_input_is_inval_and_disturbs_nothing() {
    // No persistence model.
    let f = MockFabric::builder().device("writer", &[WRITER]).device("replica", &[REPLICA]).build();
    let dev = Device::lookup(&f, REPLICA, ContextType::Local).unwrap();
    let e = f.power_cut(dev.backend()).expect_err("no model");
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains("persistent_memory"), "{e}");
    // A node with no persistent region (only local regions are outside the model).
    let f = builder(Mode::Immediate).build();
    let dev = Device::lookup(&f, REPLICA, ContextType::Local).unwrap();
    let p = Peer::new(&dev).unwrap();
    let local = p.alloc_mr(64, Usage::WRITE_SRC).unwrap();
    let e = f.power_cut(dev.backend()).expect_err("nothing persistent");
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains("no persistent region"), "{e}");
    // Nothing was disturbed: the peer still works.
    drop(local);
    p.alloc_mr(64, Usage::WRITE_DST).unwrap();
    // A device of another fabric.
    let other = MockFabric::builder().device("elsewhere", &["10.9.9.9"]).build();
    let foreign = Device::lookup(&other, "10.9.9.9", ContextType::Local).unwrap();
    assert_eq!(f.power_cut(foreign.backend()).unwrap_err().kind(), ErrorKind::InvalidInput);
    // Cut twice: the second finds the power already cut.
    let r = rig(Mode::Immediate);
    r.cut();
    let e = r.f.power_cut(r.rpeer.device().backend()).expect_err("already cut");
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains("already cut"), "{e}");
}

/// A scenario for crash points: three records, each written and flushed to persistence; the
/// acknowledged count is returned.
fn three_records(f: &MockFabric) -> u64 {
    let r = rig_on(f.clone(), "7310", true);
    let mut acked = 0;
    for i in 0..3u8 {
        let at = usize::from(i) * 64;
        r.src.write(at, &[i + 1; 64]).unwrap();
        let quiet = CompletionFlags::ON_ERROR;
        if r.writer.write(r.remote.at(at), r.src.slice(at..at + 64)).flags(quiet).post().is_err()
            || r.writer.flush(r.remote.slice(at..at + 64), FlushType::Persistent).context(1).post().is_err()
        {
            return acked;
        }
        match next_wc_or_lost(&r.writer) {
            Some(wc) if wc.is_success() => acked += 1,
            _ => return acked,
        }
    }
    acked
}

/// The next completion; `None` after a while without one (a dead connection may give none).
fn next_wc_or_lost(c: &Conn) -> Option<Wc> {
    for _ in 0..10_000 {
        if let Some(wc) = c.cq().next_wc().ok()? {
            return Some(wc);
        }
    }
    None
}

#[test]
fn power_cut__crash_points_cover_every_event_and_find_a_missing_flush() {
    let explore = CrashPoints::new(builder(Mode::Deferred), "replica");
    let check = |reboot: rpma::mock::Reboot, acked: u64| {
        let log = log_of(&reboot.cut);
        (0..acked).try_for_each(|i| {
            let at = i as usize * 64;
            (log[at..at + 64] == [i as u8 + 1; 64]).then_some(()).ok_or(format!("record {i} acknowledged, lost"))
        })
    };
    let report = explore.run(three_records, check).expect("every crash point passes");
    // Per record: a post of the write, a post of the flush, their executions, the flush's completion.
    assert_eq!(report.events, 15, "{report:?}");
    assert_eq!(report.points, 15);
    // A check that demands what was never promised fails, at a point it names.
    let e = explore
        .run(three_records, |reboot, _| {
            (log_of(&reboot.cut)[..192] == [[1; 64], [2; 64], [3; 64]].concat())
                .then_some(())
                .ok_or_else(|| "not all three records".to_owned())
        })
        .expect_err("the first crash point has nothing durable");
    assert_eq!(e.point.map(|p| p.index), Some(1), "{e}");
    assert!(e.to_string().starts_with("crash point 1 of 15 (right after a post)"), "{e}");
}

#[test]
fn power_cut__crash_point_past_the_last_event_or_unknown_device_is_an_error() {
    let e = CrashPoints::new(builder(Mode::Deferred), "replica")
        .only(1000)
        .run(three_records, |_, _| Ok(()))
        .expect_err("no event 1000");
    assert!(e.point.is_none() && e.message.contains("outside the scenario's events 1..=15"), "{e}");
    let e = CrashPoints::new(builder(Mode::Deferred), "nowhere").run(three_records, |_, _| Ok(())).unwrap_err();
    assert!(e.message.contains("no device named \"nowhere\""), "{e}");
}

#[test]
fn power_cut__through_the_cross_process_wire_the_peer_sees_a_dead_node() {
    let dir = tempfile::tempdir().unwrap();
    let f = builder(Mode::Immediate).rendezvous(dir.path().join("rv")).always_through_rendezvous(true).build();
    let r = rig_on(f, "7320", true);
    r.write(0, b"over the wire");
    r.flush(0, 13, FlushType::Persistent);
    r.write(13, b"!");
    let cut = r.cut();
    assert_eq!(&log_of(&cut)[..14], b"over the wire\0");
    assert_eq!(next_event(&r.writer), ConnEvent::Lost);
}

#[test]
fn power_cut__owner_persist_makes_durable_and_a_range_outside_is_inval() {
    for mode in MODES {
        let r = rig(mode);
        // The GPSPM way: the peer writes, the owner persists on request.
        r.write(0, b"persisted by the owner");
        r.log.write(100, b"a local store").unwrap();
        r.log.persist(0, 22).unwrap();
        r.log.persist(100, 13).unwrap();
        r.log.write(200, b"stored, not persisted").unwrap();
        let e = r.log.persist(LEN - 8, 16).expect_err("past the end");
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert!(
            e.to_string().contains(&format!("[{}, {} + 16) is outside the region of {LEN} bytes", LEN - 8, LEN - 8)),
            "{e}"
        );
        let log = log_of(&r.cut());
        assert_eq!(&log[..22], b"persisted by the owner", "{mode:?}");
        assert_eq!(&log[100..113], b"a local store", "{mode:?}");
        assert_eq!(&log[200..221], &[0; 21], "{mode:?}");
    }
}

#[test]
fn power_cut__a_region_cut_deregisters_at_once_and_gives_its_memory_back() {
    for mode in MODES {
        let r = rig(mode);
        r.write(0, b"x");
        r.cut();
        let started = Instant::now();
        let memory = r.log.dereg().expect("dereg after the cut");
        assert!(memory.is_some(), "{mode:?}: nothing reaches a region cut off: its memory comes back");
        assert!(started.elapsed() < Duration::from_secs(5), "{mode:?}: dereg waited {:?}", started.elapsed());
    }
}
