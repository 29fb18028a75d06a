//! The conformance suite, plus verbs-only cases, on a real RDMA device.
//!
//! The device and address come from `RPMA_TEST_DEVICE` and `RPMA_TEST_ADDR` (the Soft-RoCE VM
//! of `scripts/softroce/run.sh` exports `rxe0` and `10.77.0.1`). Without `RPMA_TEST_DEVICE` the
//! binary prints one line saying the tests were skipped and succeeds (so `cargo test
//! --all-features` passes on hosts without RDMA); with it set, a missing address or a device that
//! is not there fails the run. The cases of two devices take the second from
//! `RPMA_TEST_DEVICE2` and `RPMA_TEST_ADDR2` (the VM's `rxe1` at `10.77.1.1`), and fail when
//! those are missing.
#![allow(non_snake_case, missing_docs)]

mod conformance;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use conformance::Backend;
use rpma::verbs::{Device, Verbs};
use rpma::{Capabilities, ContextType};

struct VerbsBackend {
    addr: String,
    caps: Capabilities,
    next_port: AtomicU32,
}

impl Backend for VerbsBackend {
    type T = Verbs;
    fn transport(&self) -> Verbs {
        Verbs::new()
    }
    fn addr(&self) -> String {
        self.addr.clone()
    }
    fn port(&self) -> String {
        self.next_port.fetch_add(1, Ordering::Relaxed).to_string()
    }
    fn caps(&self) -> Capabilities {
        self.caps.clone()
    }
}

/// Checks the environment and the device: `Ok(None)` = skip, `Err` = fail loudly.
fn backend(listing: bool) -> Result<Option<VerbsBackend>, String> {
    let dev = std::env::var("RPMA_TEST_DEVICE").ok().filter(|d| !d.is_empty());
    let addr = std::env::var("RPMA_TEST_ADDR").ok().filter(|a| !a.is_empty());
    let Some(dev) = dev else {
        return Ok(None);
    };
    let Some(addr) = addr else {
        if listing {
            return Ok(None);
        }
        return Err(format!("RPMA_TEST_DEVICE={dev} is set but RPMA_TEST_ADDR is not"));
    };
    if listing {
        return Ok(None);
    }
    let d = Device::lookup(&Verbs::new(), &addr, ContextType::Local)
        .map_err(|e| format!("no RDMA device owns {addr} (RPMA_TEST_ADDR): {e}"))?;
    if d.name() != dev {
        return Err(format!("{addr} belongs to device {}, not RPMA_TEST_DEVICE={dev}", d.name()));
    }
    let caps = d.capabilities().map_err(|e| format!("querying {dev}: {e}"))?;
    eprintln!("verbs tests on {dev} ({addr}): {caps:?}");
    // Distinct ports per run so that consecutive runs do not meet each other's leftovers, all
    // below the ephemeral range (32768..) from which a device lookup's CM id, kept alive with
    // the device, takes its port.
    let base = 10_000 + (std::process::id() % 200) * 100;
    Ok(Some(VerbsBackend { addr, caps, next_port: AtomicU32::new(base) }))
}

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let backend = match backend(args.list) {
        Ok(Some(b)) => Some(Arc::new(b)),
        Ok(None) if args.list => None,
        Ok(None) => {
            println!("verbs tests skipped: RPMA_TEST_DEVICE unset (run them with scripts/test-verbs.sh)");
            return;
        }
        Err(e) => {
            eprintln!("verbs tests cannot run: {e}");
            std::process::exit(2);
        }
    };
    let mut trials = Vec::new();
    let cases = conformance::all::<VerbsBackend>().into_iter().chain(verbs_only::cases());
    for (name, f) in cases {
        let b = backend.clone();
        trials.push(libtest_mimic::Trial::test(name, move || {
            let b = b.ok_or_else(|| libtest_mimic::Failed::from("no device (listing only)"))?;
            f(&b);
            Ok(())
        }));
    }
    libtest_mimic::run(&args, trials).exit();
}

/// Cases only a real device can show.
mod verbs_only {
    use std::time::{Duration, Instant};

    use std::sync::Arc;

    use rpma::transport::QueueConfig;
    use rpma::verbs::Verbs;
    use rpma::{Conn, ConnEvent, ConnReq, ErrorKind, Transport, Usage, WcStatus};

    use super::conformance::harness::{mr, next_wc, pair, remote, Backend, Case};
    use super::VerbsBackend;

    pub fn cases() -> Vec<Case<VerbsBackend>> {
        vec![
            ("verbs_only__write_bad_rkey_remote_access_error", write_bad_rkey as fn(&VerbsBackend)),
            ("verbs_only__peer_deleted_closed", peer_deleted_closed),
            ("verbs_only__no_listener_event", no_listener_event),
            ("verbs_only__flush_atomic_write_native_iff_detected", native::native_iff_detected),
            ("verbs_only__native_only_nosupp_without_native", native::native_only_nosupp),
            ("verbs_only__persistent_flush_native_to_pmem", native::persistent_flush_to_pmem),
            ("verbs_only__persistent_flush_native_to_dram_is_an_error", native::persistent_flush_to_dram),
            ("verbs_only__fork_after_registration", fork_after_registration),
            ("verbs_only__clean_teardown_leaks_nothing", clean_teardown_leaks_nothing),
            ("verbs_only__file_mapping_on_tmpfs_is_the_region", file_mapping_on_tmpfs),
            ("verbs_only__addresses_of_both_ends", addresses_of_both_ends),
            ("verbs_only__srq_of_another_device_refused_by_the_backend", srq_of_another_device),
            ("verbs_only__alloc_pd_native_ops_are_the_devices", alloc_pd_native_ops_are_the_devices),
            (
                "verbs_only__retry_count_and_ack_timeout_reach_the_queue_pairs",
                retry_count_and_ack_timeout_reach_the_qps,
            ),
        ]
    }

    /// `ConnCfg::with_retry_count` and `with_ack_timeout` as the device reports them on the
    /// established queue pairs (`ibv_query_qp`): each side's ACK timeout is its own; the retry
    /// count of both is the connecting side's (the CM carries it in its request, `rdma_accept`
    /// ignores the accepting side's). Then a write still lands.
    fn retry_count_and_ack_timeout_reach_the_qps(b: &VerbsBackend) {
        use super::conformance::harness::pair_with;
        use rpma::ConnCfg;

        let t = b.transport();
        let ccfg = ConnCfg::new().with_retry_count(2).with_ack_timeout(14);
        let scfg = ConnCfg::new().with_retry_count(5).with_ack_timeout(16);
        let p = pair_with(b, &t, Some(&ccfg), Some(&scfg), None, None);
        assert_eq!(p.client.backend().retry_attrs().expect("client"), (2, 14));
        assert_eq!(p.server.backend().retry_attrs().expect("server"), (2, 16));
        let d = pair(b, &t);
        let (client_retry, client_timeout) = d.client.backend().retry_attrs().expect("client");
        let (_, server_timeout) = d.server.backend().retry_attrs().expect("server");
        assert_eq!(client_retry, rpma::verbs::ConnCfg::DEFAULT_RETRY_COUNT, "librpma's 7 by default");
        // What the connection manager chose when no ACK timeout was set (docs/semantics.md,
        // "Dead peers": 0 means no retransmission timer at all).
        eprintln!("default local ACK timeout exponent: client {client_timeout}, server {server_timeout}");
        let target = mr(&p.speer, 64, Usage::WRITE_DST);
        let src = mr(&p.cpeer, 64, Usage::WRITE_SRC);
        src.write(0, b"retry 2!").unwrap();
        p.client.write(remote(&target).at(0), src.slice(0..8)).context(7).post().unwrap();
        assert_eq!(next_wc(p.client.cq()).status(), WcStatus::Success);
        assert_eq!(target.to_vec(0, 8).unwrap(), b"retry 2!");
    }

    /// docs/memory.md, "Fork": registered memory, a connection, then `fork()`; the child writes
    /// into its copy of both registered buffers and exits. The parent's bytes are untouched, the
    /// device still reads and writes the parent's pages (also after the parent writes them again
    /// with the CPU, the case copy-on-write would break), and the connection keeps working.
    fn fork_after_registration(b: &VerbsBackend) {
        use nix::libc;
        use rpma::verbs::ForkSafety;

        let t = b.transport();
        let p = pair(b, &t);
        let safety = rpma::verbs::fork_safety();
        eprintln!("fork safety: {safety:?}");
        assert_ne!(safety, ForkSafety::Disabled, "rpma-verbs leaves fork unsafe");
        let dst = mr(&p.speer, 4096, Usage::WRITE_DST | Usage::READ_SRC);
        let src = mr(&p.cpeer, 4096, Usage::WRITE_SRC | Usage::READ_DST);
        let rdst = remote(&dst);
        dst.write(0, &[0xA5; 64]).unwrap();
        src.write(0, &[0x3C; 64]).unwrap();
        let (dst_addr, src_addr) = (dst.addr() as usize, src.addr() as usize);
        // SAFETY: [V5] the child neither uses nor drops an rpma object it inherited: it only
        // stores into its copies of the two buffers and `_exit`s (both async-signal-safe).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: [V5, M2] both ranges are the child's copies of the parent's live 4096-byte
            // regions, reached by raw pointer only (or, with ForkSafety::Enabled, unmapped: the
            // store faults, as documented); `_exit` runs no destructor of an inherited object.
            unsafe {
                std::ptr::write_bytes(dst_addr as *mut u8, 0xEE, 4096);
                std::ptr::write_bytes(src_addr as *mut u8, 0xEE, 4096);
                libc::_exit(0);
            }
        }
        let mut status = 0;
        // SAFETY: [V2] a plain wait for our child; `status` is writable for the call.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        match safety {
            ForkSafety::Unneeded => {
                assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child status {status:#x}");
            }
            _ => assert!(
                libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV,
                "child status {status:#x}: registered pages should be absent in the child"
            ),
        }
        // The parent's bytes, as the CPU sees them.
        assert_eq!(dst.to_vec(0, 64).unwrap(), vec![0xA5; 64]);
        assert_eq!(src.to_vec(0, 64).unwrap(), vec![0x3C; 64]);
        // As the device sees them: it reads the parent's src and writes the parent's dst ...
        p.client.write(rdst.at(64), src.slice(0..64)).context(1).post().unwrap();
        let wc = next_wc(p.client.cq());
        assert_eq!((wc.wr_id(), wc.status()), (1, WcStatus::Success), "{wc:?}");
        assert_eq!(dst.to_vec(64, 64).unwrap(), vec![0x3C; 64]);
        // ... and reads the parent's dst into the parent's src.
        p.client.read(src.slice(128..192), rdst.at(0)).context(2).post().unwrap();
        let wc = next_wc(p.client.cq());
        assert_eq!((wc.wr_id(), wc.status()), (2, WcStatus::Success), "{wc:?}");
        assert_eq!(src.to_vec(128, 64).unwrap(), vec![0xA5; 64]);
        // The parent writes both buffers again with the CPU: the device sees those bytes too.
        dst.write(0, &[0x77; 64]).unwrap();
        src.write(0, &[0x11; 64]).unwrap();
        p.client.read(src.slice(192..256), rdst.at(0)).context(3).post().unwrap();
        let wc = next_wc(p.client.cq());
        assert_eq!((wc.wr_id(), wc.status()), (3, WcStatus::Success), "{wc:?}");
        assert_eq!(src.to_vec(192, 64).unwrap(), vec![0x77; 64]);
        p.client.write(rdst.at(256), src.slice(0..64)).context(4).post().unwrap();
        let wc = next_wc(p.client.cq());
        assert_eq!((wc.wr_id(), wc.status()), (4, WcStatus::Success), "{wc:?}");
        assert_eq!(dst.to_vec(256, 64).unwrap(), vec![0x11; 64]);
        // The connection still works both ways: a disconnect handshake.
        p.client.disconnect().unwrap();
        assert_eq!(next_event(&p.server), ConnEvent::Closed);
        p.server.disconnect().unwrap();
        assert_eq!(next_event(&p.client), ConnEvent::Closed);
    }

    /// Native flush and atomic write: the path taken follows the detected
    /// capabilities, proven by rpma-verbs' counters; `RPMA_TEST_EXPECT_NATIVE=flush,atomic_write`
    /// (scripts/test-verbs.sh on debian13) makes missing detection a failure.
    mod native {
        use rpma::verbs::{native_only, op_counts, persistent_flush, NativeOnly, PersistentFlush};
        use rpma::{ErrorKind, FlushType, PeerCfg, Usage, WcStatus};

        use super::super::conformance::harness::{mr, next_wc, pair, remote, Backend};
        use super::super::VerbsBackend;

        fn expected(what: &str) -> bool {
            std::env::var("RPMA_TEST_EXPECT_NATIVE").is_ok_and(|v| v.split(',').any(|w| w.trim() == what))
        }

        /// write, flush (both types), atomic write, flush: data in place, and every flush and
        /// atomic write took the native path exactly when the device has it.
        pub fn native_iff_detected(b: &VerbsBackend) {
            let caps = b.caps();
            assert!(!expected("flush") || caps.native_flush, "native flush expected but not detected: {caps:?}");
            assert!(
                !expected("atomic_write") || caps.native_atomic_write,
                "native atomic write expected but not detected: {caps:?}"
            );
            let t = b.transport();
            let p = pair(b, &t);
            p.client.apply_remote_peer_cfg(&PeerCfg::new().with_direct_write_to_pmem(true));
            let dst = mr(&p.speer, 4096, Usage::WRITE_DST | Usage::FLUSH_TYPES);
            let src = mr(&p.cpeer, 4096, Usage::WRITE_SRC);
            let r = remote(&dst);
            let data: Vec<u8> = (0..1024u32).map(|i| (i * 7 + 3) as u8).collect();
            src.write(0, &data).unwrap();
            let before = op_counts();
            let c = &p.client;
            // A native persistent flush needs pmem behind the region (the two cases below): on
            // DRAM the persistent flushes here are the RDMA Reads of PersistentFlush::Read, or
            // flushes to visibility under the default rule.
            let read_rule = persistent_flush() == PersistentFlush::Read;
            let pers = if read_rule || !caps.native_flush { FlushType::Persistent } else { FlushType::Visibility };
            c.write(r.at(8), src.slice(..1024)).context(1).post().unwrap();
            c.flush(r.slice(8..1032), FlushType::Visibility).context(2).post().unwrap();
            c.flush(r.slice(8..1032), pers).context(3).post().unwrap();
            c.atomic_write(r.at(0), 1024u64.to_le_bytes()).context(4).post().unwrap();
            c.flush(r.slice(0..8), pers).context(5).post().unwrap();
            for id in 1..=5 {
                let wc = next_wc(c.cq());
                assert_eq!((wc.wr_id(), wc.status()), (id, WcStatus::Success), "{wc:?}");
            }
            let after = op_counts();
            let mut want = 1024u64.to_le_bytes().to_vec();
            want.extend_from_slice(&data);
            assert_eq!(dst.to_vec(0, 1032).unwrap(), want);
            // Other cases run in parallel threads of this process: compare the direction only.
            let (fnat, femu) = (after.flush_native - before.flush_native, after.flush_emulated - before.flush_emulated);
            let (anat, aemu) = (
                after.atomic_write_native - before.atomic_write_native,
                after.atomic_write_emulated - before.atomic_write_emulated,
            );
            let pread = after.flush_persistent_read - before.flush_persistent_read;
            if caps.native_flush && read_rule {
                // visibility: native; persistent: the RDMA Read the process chose
                assert!(fnat >= 1 && femu == 0 && pread >= 2, "native flush detected, but: {before:?} -> {after:?}");
            } else if caps.native_flush {
                assert!(fnat >= 3 && femu == 0, "native flush detected, but: {before:?} -> {after:?}");
            } else {
                assert!(femu >= 3 && fnat == 0 && pread == 0, "no native flush, but: {before:?} -> {after:?}");
            }
            if caps.native_atomic_write {
                assert!(anat >= 1 && aemu == 0, "native atomic write detected, but: {before:?} -> {after:?}");
            } else {
                assert!(aemu >= 1 && anat == 0, "no native atomic write, but: {before:?} -> {after:?}");
            }
            eprintln!(
                "native flush {}, native atomic write {}: {before:?} -> {after:?}",
                caps.native_flush, caps.native_atomic_write
            );
        }

        /// With flush and atomic write required native (a process-wide policy: run in a child
        /// process of this binary unless RPMA_VERBS_NATIVE_ONLY is set already), a device without
        /// them answers Unsupported with a clear message, and nothing is posted; with them, they
        /// run.
        pub fn native_only_nosupp(b: &VerbsBackend) {
            let want = NativeOnly { flush: true, atomic_write: true };
            if native_only() != want {
                let exe = std::env::current_exe().unwrap();
                let out = std::process::Command::new(exe)
                    .args(["verbs_only__native_only_nosupp_without_native", "--exact", "--test-threads=1"])
                    .env("RPMA_VERBS_NATIVE_ONLY", "flush,atomic_write")
                    .output()
                    .unwrap();
                let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
                assert!(out.status.success() && text.contains("1 passed"), "child: {}\n{text}", out.status);
                return;
            }
            let caps = b.caps();
            let t = b.transport();
            let p = pair(b, &t);
            p.client.apply_remote_peer_cfg(&PeerCfg::new().with_direct_write_to_pmem(true));
            let dst = mr(&p.speer, 4096, Usage::WRITE_DST | Usage::FLUSH_TYPES);
            let r = remote(&dst);
            let c = &p.client;
            let flush = c.flush(r.slice(0..64), FlushType::Visibility).context(1).post();
            let aw = c.atomic_write(r.at(0), [7; 8]).context(2).post();
            for (ok, res, what) in [(caps.native_flush, flush, "flush"), (caps.native_atomic_write, aw, "atomic write")]
            {
                if ok {
                    res.unwrap();
                    let wc = next_wc(c.cq());
                    assert_eq!(wc.status(), WcStatus::Success, "{wc:?}");
                } else {
                    let e = res.expect_err("emulated despite the native-only policy");
                    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
                    assert!(e.to_string().contains(&format!("native {what} required")), "{e}");
                }
            }
            eprintln!("native only: flush {}, atomic write {}", caps.native_flush, caps.native_atomic_write);
        }

        /// The persistent flush rule (docs/native-ops.md) on pmem: a region on the devdax device
        /// registered for persistent flushes; write + persistent flush succeed, natively on a
        /// device with native flush (counted `flush_persistent_native`), as the RDMA Read on one
        /// without (debian12).
        pub fn persistent_flush_to_pmem(b: &VerbsBackend) {
            if !super::with_native_persistent_flush("verbs_only__persistent_flush_native_to_pmem") {
                return;
            }
            let Some(mem) = super::test_pmem(0, 4096) else { return };
            let caps = b.caps();
            let t = b.transport();
            let p = pair(b, &t);
            p.client.apply_remote_peer_cfg(&PeerCfg::new().with_direct_write_to_pmem(true));
            mem.volatile().write(0, &[0; 4096]).unwrap();
            let dst = p.speer.reg_mr(mem, Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPES).unwrap();
            let src = mr(&p.cpeer, 4096, Usage::WRITE_SRC);
            let r = remote(&dst);
            let data: Vec<u8> = (0..4096u32).map(|i| (i * 13 + 5) as u8).collect();
            src.write(0, &data).unwrap();
            let before = op_counts();
            let c = &p.client;
            c.write(r.at(0), src.slice(..4096)).context(1).post().unwrap();
            c.flush(r.slice(0..4096), FlushType::Persistent).context(2).post().unwrap();
            for id in 1..=2 {
                let wc = next_wc(c.cq());
                assert_eq!((wc.wr_id(), wc.status()), (id, WcStatus::Success), "{wc:?}");
            }
            let after = op_counts();
            assert_eq!(dst.to_vec(0, 4096).unwrap(), data);
            let pn = after.flush_persistent_native - before.flush_persistent_native;
            if caps.native_flush {
                assert!(pn >= 1, "native persistent flush expected: {before:?} -> {after:?}");
            } else {
                assert_eq!(pn, 0, "no native flush on this device: {before:?} -> {after:?}");
            }
            eprintln!("persistent flush to pmem: native {}: {before:?} -> {after:?}", caps.native_flush);
        }

        /// The persistent flush rule on DRAM: the kernel refuses `IBV_ACCESS_FLUSH_PERSISTENT`
        /// on it, so a native persistent flush into a DRAM region completes with a remote
        /// access error (never a silent success); without native flush it is the RDMA Read.
        pub fn persistent_flush_to_dram(b: &VerbsBackend) {
            if !super::with_native_persistent_flush("verbs_only__persistent_flush_native_to_dram_is_an_error") {
                return;
            }
            let caps = b.caps();
            let t = b.transport();
            let p = pair(b, &t);
            p.client.apply_remote_peer_cfg(&PeerCfg::new().with_direct_write_to_pmem(true));
            let dst = mr(&p.speer, 4096, Usage::WRITE_DST | Usage::FLUSH_TYPES);
            let src = mr(&p.cpeer, 4096, Usage::WRITE_SRC);
            let r = remote(&dst);
            let c = &p.client;
            c.write(r.at(0), src.slice(..64)).context(1).post().unwrap();
            c.flush(r.slice(0..64), FlushType::Persistent).context(2).post().unwrap();
            let wc = next_wc(c.cq());
            if caps.native_flush {
                // the write may complete first (success) or be flushed in error with the QP
                let wc = if wc.wr_id() == 1 && wc.status() == WcStatus::Success { next_wc(c.cq()) } else { wc };
                assert_eq!(wc.status(), WcStatus::RemAccessErr, "a native persistent flush into DRAM: {wc:?}");
            } else {
                assert_eq!((wc.wr_id(), wc.status()), (1, WcStatus::Success), "{wc:?}");
                let wc = next_wc(c.cq());
                assert_eq!((wc.wr_id(), wc.status()), (2, WcStatus::Success), "{wc:?}");
            }
            eprintln!("persistent flush to DRAM, native flush {}: {wc:?}", caps.native_flush);
        }
    }

    /// Runs the case `name` in a child process of this binary with
    /// `RPMA_VERBS_PERSISTENT_FLUSH=native` (the rule is process-wide); `true` if this process
    /// is that child (or has the rule already) and should run the case itself.
    fn with_native_persistent_flush(name: &str) -> bool {
        if rpma::verbs::persistent_flush() == rpma::verbs::PersistentFlush::Native {
            return true;
        }
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args([name, "--exact", "--test-threads=1", "--nocapture"])
            .env("RPMA_VERBS_PERSISTENT_FLUSH", "native")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && text.contains("1 passed"), "child: {}\n{text}", out.status);
        eprint!("{text}");
        false
    }

    /// `RPMA_TEST_PMEM` (a devdax device; scripts/softroce/README.md, "Persistent memory"):
    /// `None` when unset (the case is not asked for: it says so), a failure when it is set but
    /// is no devdax device.
    pub(crate) fn test_pmem(slot: u64, len: usize) -> Option<rpma::Memory> {
        let Some(path) = std::env::var_os("RPMA_TEST_PMEM").filter(|p| !p.is_empty()) else {
            eprintln!("RPMA_TEST_PMEM unset: no pmem case (SOFTROCE_PMEM=256M scripts/test-verbs.sh runs them)");
            return None;
        };
        // 2 MiB slots of the device: cases that run at the same time use different ones
        // (verbs.rs 0-3, interop 4-11, the CLI's tests 16-31)
        let opts = rpma::mem::MapOptions::new().offset(slot << 21).len(len).map_sync(rpma::mem::MapSync::Never);
        // SAFETY: [M5] nobody truncates a devdax device (it has a fixed size); [M3] no slice of
        // this memory is made while it is registered.
        let m = unsafe { opts.map(&path) }.unwrap_or_else(|e| panic!("RPMA_TEST_PMEM={path:?}: {e}"));
        assert_eq!(m.kind(), rpma::mem::MemoryKind::DevDax, "RPMA_TEST_PMEM={path:?} is not a devdax device");
        Some(m)
    }

    /// Nobody listens on the port: record which event the device's CM reports (the conformance
    /// case accepts REJECTED or UNREACHABLE; the mock says UNREACHABLE).
    fn no_listener_event(b: &VerbsBackend) {
        let t = b.transport();
        let p = super::conformance::harness::peer(b, &t);
        let req = ConnReq::new(&p, &b.addr(), &b.port(), None).unwrap();
        let client = req.connect(None).unwrap();
        let ev = next_event(&client);
        eprintln!("no listener: {ev:?}");
        assert!(matches!(ev, ConnEvent::Rejected | ConnEvent::Unreachable), "got {ev:?}");
        client.delete().unwrap();
    }

    fn set_nonblocking<T: Transport>(c: &Conn<T>) {
        let fd = c.event_fd();
        nix::fcntl::fcntl(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )
        .expect("O_NONBLOCK");
    }

    /// The next connection event (fails after 20 s).
    fn next_event<T: Transport>(c: &Conn<T>) -> ConnEvent {
        let deadline = Instant::now() + Duration::from_secs(20);
        set_nonblocking(c);
        loop {
            match c.next_event() {
                Ok(e) => return e,
                Err(e) if e.kind() == ErrorKind::NoEvent => {
                    assert!(Instant::now() < deadline, "no connection event within 20 s");
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("next_event: {e}"),
            }
        }
    }

    /// A write with an rkey the target never issued: the real responder NAKs it, the initiator
    /// gets a remote access error, and the QP enters the error state (later work is flushed).
    fn write_bad_rkey(b: &VerbsBackend) {
        let t = b.transport();
        let p = pair(b, &t);
        let dst = mr(&p.speer, 4096, Usage::WRITE_DST);
        let src = mr(&p.cpeer, 4096, Usage::WRITE_SRC);
        let good = remote(&dst);
        let mut desc = dst.descriptor();
        // The descriptor holds the rkey at bytes 16..20 (docs/semantics.md#descriptors); flip every
        // bit.
        for x in &mut desc[16..20] {
            *x = !*x;
        }
        let bad = rpma::MrRemote::from_descriptor(&desc).expect("descriptor");
        p.client.write(bad.at(0), src.slice(..64)).context(7).post().unwrap();
        let wc = next_wc(p.client.cq());
        assert_eq!(wc.wr_id(), 7);
        assert_eq!(wc.status(), WcStatus::RemAccessErr, "{wc:?}");
        // The QP is in the error state: even a valid write is flushed.
        p.client.write(good.at(0), src.slice(..64)).context(8).post().unwrap();
        let wc = next_wc(p.client.cq());
        assert_eq!(wc.wr_id(), 8);
        assert_eq!(wc.status(), WcStatus::WrFlushErr, "{wc:?}");
        assert_eq!(dst.to_vec(0, 64).unwrap(), vec![0u8; 64]);
    }

    /// A whole flow (regions, a write and a read, deregistration, teardown) leaks nothing: the
    /// leak report (what rpma-verbs keeps on purpose when a release fails, docs/memory.md M1)
    /// does not move. No test of this binary injects failures, so the report is stable.
    fn clean_teardown_leaks_nothing(b: &VerbsBackend) {
        let before = rpma::verbs::leaks();
        {
            let t = b.transport();
            let p = pair(b, &t);
            let dst = mr(&p.speer, 4096, Usage::WRITE_DST | Usage::READ_SRC);
            let src = mr(&p.cpeer, 4096, Usage::WRITE_SRC | Usage::READ_DST);
            let r = remote(&dst);
            p.client.write(r.at(0), src.slice(..64)).context(1).post().unwrap();
            assert_eq!(next_wc(p.client.cq()).status(), WcStatus::Success);
            p.client.read(src.slice(64..128), r.at(0)).context(2).post().unwrap();
            assert_eq!(next_wc(p.client.cq()).status(), WcStatus::Success);
            assert!(dst.dereg().unwrap().is_some(), "the memory comes back");
            assert!(src.dereg().unwrap().is_some(), "the memory comes back");
        }
        assert_eq!(rpma::verbs::leaks(), before);
    }

    /// Both ends' addresses as the backend reports them (`rdma_get_local_addr`,
    /// `rdma_get_peer_addr`; the `tracing` feature's span records them): each side's remote
    /// address is the other's local one, the server's is the address it listens on, and the
    /// client's has a port of its own.
    fn addresses_of_both_ends(b: &VerbsBackend) {
        use rpma::transport::CmBackend;
        let t = b.transport();
        let p = pair(b, &t);
        let (c_local, c_remote) = p.client.backend().addrs();
        let (s_local, s_remote) = p.server.backend().addrs();
        let (c_local, c_remote) = (c_local.expect("client local"), c_remote.expect("client remote"));
        let (s_local, s_remote) = (s_local.expect("server local"), s_remote.expect("server remote"));
        assert_eq!(c_remote, s_local, "the client reaches the server's address");
        assert_eq!(s_remote, c_local, "the server sees the client's address");
        assert_eq!(s_local.ip().to_string(), b.addr(), "the server listens on the test address");
        assert_ne!(c_local.port(), 0, "the client's port is bound");
    }

    /// A region that is a shared mapping of a file on tmpfs (Linux 6.5+ lets the device pin a
    /// shared file mapping only on DAX, tmpfs or hugetlbfs): a peer's write lands in the file.
    fn file_mapping_on_tmpfs(b: &VerbsBackend) {
        let t = b.transport();
        let p = pair(b, &t);
        let path = std::path::Path::new("/dev/shm").join(format!("rpma-verbs-file-{}", std::process::id()));
        // SAFETY: [M5] the file is this test's own, in /dev/shm; nothing truncates or writes it
        // while it is mapped.
        let mem = unsafe { rpma::mem::MapOptions::new().create(true).len(4096).map(&path) }.expect("map");
        let dst = p.speer.reg_mr(mem, Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY).expect("register the mapping");
        let mut src = mr(&p.cpeer, 4096, Usage::WRITE_SRC);
        src.as_mut_slice().unwrap()[..12].copy_from_slice(b"in the file!");
        let r = remote(&dst);
        p.client.write(r.at(100), src.slice(..12)).context(1).post().unwrap();
        p.client.flush(r.slice(100..112), rpma::FlushType::Visibility).context(2).post().unwrap();
        for id in [1, 2] {
            let wc = next_wc(p.client.cq());
            assert_eq!((wc.wr_id(), wc.status()), (id, WcStatus::Success));
        }
        let file = std::fs::read(&path).expect("read the file");
        assert_eq!(&file[100..112], b"in the file!");
        drop(dst);
        let _ = std::fs::remove_file(&path);
    }

    /// The second device (`RPMA_TEST_DEVICE2`, owning `RPMA_TEST_ADDR2`): its name and address.
    /// Missing while `RPMA_TEST_DEVICE` is set, the case fails (it would test nothing).
    fn second_device() -> (String, String) {
        let var = |v: &str| std::env::var(v).ok().filter(|s| !s.is_empty());
        match (var("RPMA_TEST_DEVICE2"), var("RPMA_TEST_ADDR2")) {
            (Some(d), Some(a)) => (d, a),
            (d, a) => panic!(
                "a second RDMA device is needed: RPMA_TEST_DEVICE2={d:?}, RPMA_TEST_ADDR2={a:?} \
                 (scripts/softroce/run.sh exports rxe1 and its address)"
            ),
        }
    }

    /// A queue configuration of the defaults with `srq`, made by hand (not by rpma-core).
    fn queue_config<'a>(srq: Option<&'a Arc<<Verbs as Transport>::Srq>>) -> QueueConfig<'a, Verbs> {
        QueueConfig {
            timeout_ms: 5000,
            cq_size: 10,
            rcq_size: 0,
            sq_size: 10,
            rq_size: 10,
            max_sge: 1,
            max_inline: 0,
            retry_count: 7,
            ack_timeout: None,
            shared_channel: false,
            srq,
        }
    }

    /// A protection domain made straight from the transport, with the device's capabilities.
    fn raw_pd(t: &Verbs, dev: &<Verbs as Transport>::Device) -> Arc<<Verbs as Transport>::Pd> {
        let caps = t.capabilities(dev).expect("capabilities");
        Arc::new(t.alloc_pd(dev, &caps).expect("alloc_pd"))
    }

    /// rpma-verbs' own check (docs/memory.md V10), through the public backend contract and without
    /// rpma-core: a hand-made `QueueConfig` with an SRQ of the second device, given to
    /// `Transport::connect_request` on a PD of the first, and to an endpoint of the first that
    /// takes a request, is `InvalidInput` naming the SRQ and both devices, with or without the
    /// SRQ's own receive CQ (libibverbs would send the SRQ's and CQ's handles, numbered by the
    /// second device's context, to the first's). The client of the refused request is rejected; the
    /// SRQ of the first device is taken.
    fn srq_of_another_device(b: &VerbsBackend) {
        use rpma::transport::{ListenerBackend, SrqBackend};
        use rpma::{ContextType, Peer};
        let (name2, addr2) = second_device();
        let t = b.transport();
        let dev1 = t.lookup_device(&b.addr(), ContextType::Local).expect("lookup of the first device");
        let dev2 = t.lookup_device(&addr2, ContextType::Local).expect("lookup of RPMA_TEST_ADDR2");
        let name1 = t.device_name(&dev1);
        assert_eq!(t.device_name(&dev2), name2, "RPMA_TEST_ADDR2={addr2} is not on RPMA_TEST_DEVICE2");
        assert_ne!(name1, name2, "two devices are needed");
        let (pd1, pd2) = (raw_pd(&t, &dev1), raw_pd(&t, &dev2));
        let says = format!("the shared receive queue is of device {name2}, the connection's CM id of device {name1}");
        let client_peer = Peer::new(&rpma::verbs::Device::lookup(&t, &b.addr(), ContextType::Local).unwrap()).unwrap();
        for rcq_size in [0, 4] {
            let srq2 = Arc::new(t.create_srq(&pd2, 4, rcq_size).expect("an SRQ on the second device"));
            assert_eq!(srq2.rcq().is_some(), rcq_size > 0);
            let cfg = queue_config(Some(&srq2));
            // An outgoing request.
            let e = t.connect_request(&pd1, &b.addr(), &b.port(), &cfg).expect_err("an SRQ of another device");
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
            assert!(e.to_string().contains(&says), "{e}");
            // An incoming one.
            let port = b.port();
            let l = t.listen(&pd1, &b.addr(), &port).expect("listen");
            let fd = std::os::fd::AsRawFd::as_raw_fd(&l.fd());
            nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK)).expect("O_NONBLOCK");
            let client = ConnReq::new(&client_peer, &b.addr(), &port, None).unwrap().connect(None).unwrap();
            let deadline = Instant::now() + Duration::from_secs(20);
            let e = loop {
                match l.next_request(&cfg) {
                    Err(e) if e.kind() == ErrorKind::NoEvent => {
                        assert!(Instant::now() < deadline, "no connection request within 20 s");
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    r => break r.expect_err("an SRQ of another device"),
                }
            };
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
            assert!(e.to_string().contains(&says), "{e}");
            assert_eq!(next_event(&client), ConnEvent::Rejected);
            // The first device's own SRQ is taken.
            let srq1 = Arc::new(t.create_srq(&pd1, 4, rcq_size).expect("an SRQ on the first device"));
            let qp = t.connect_request(&pd1, &b.addr(), &b.port(), &queue_config(Some(&srq1))).expect("own SRQ");
            rpma::transport::CmBackend::destroy(qp).unwrap();
        }
    }

    /// `Transport::alloc_pd` takes native flush and atomic write from the device's own probe,
    /// not from the capabilities it is handed: given capabilities that claim both (what safe code
    /// may pass), a PD on a device without them (debian12's rxe) registers a flush target without
    /// `IBV_ACCESS_FLUSH_GLOBAL` (which such a kernel refuses) and makes queue pairs without
    /// `IBV_QP_EX_WITH_FLUSH` (which its provider refuses; with it, rpma-verbs would read
    /// `wr_flush`, past the end of an older `ibv_qp_ex`). On a device with them, the same
    /// calls work natively.
    fn alloc_pd_native_ops_are_the_devices(b: &VerbsBackend) {
        use rpma::ContextType;
        let t = b.transport();
        let dev = t.lookup_device(&b.addr(), ContextType::Local).expect("lookup");
        let mut claimed = t.capabilities(&dev).expect("capabilities");
        eprintln!("device: native flush {}, native atomic write {}", claimed.native_flush, claimed.native_atomic_write);
        (claimed.native_flush, claimed.native_atomic_write) = (true, true);
        let pd = Arc::new(t.alloc_pd(&dev, &claimed).expect("alloc_pd"));
        let qp = t.connect_request(&pd, &b.addr(), &b.port(), &queue_config(None)).expect("a queue pair");
        let mem = rpma::Memory::page_aligned(4096).unwrap();
        let mr = t.reg_mr(&pd, mem, Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY).expect("a flush target");
        rpma::transport::CmBackend::destroy(qp).unwrap();
        rpma::transport::MrBackend::dereg(mr).unwrap();
    }

    /// The peer deletes its connection without disconnecting first: librdmacm sends a DREQ
    /// when the connected id is destroyed, so this side sees CLOSED.
    fn peer_deleted_closed(b: &VerbsBackend) {
        let t = b.transport();
        let p = pair(b, &t);
        p.server.delete().unwrap();
        assert_eq!(next_event(&p.client), ConnEvent::Closed);
        p.client.disconnect().unwrap();
        p.client.delete().unwrap();
    }
}
