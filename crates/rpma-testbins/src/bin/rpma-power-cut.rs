//! The guest side of `scripts/softroce/power-cut.sh` (docs/reliability.md, "Power cuts").
//!
//! `rpma-power-cut write DEVDAX CYCLE`: one process, a server and a client over the RDMA device
//! (`RPMA_TEST_ADDR`). The server registers the first [`REGION`] bytes of the devdax device for
//! writes and persistent flushes and declares direct write to PMem; the client writes numbered,
//! checksummed 64-byte records into it, record `n` at `n * 64`, each made persistent on its own
//! (an RDMA Write and a persistent flush, native `IBV_FLUSH_PERSISTENT` where the device has it,
//! else the RDMA Read), and prints `ACK n` once the flush has completed, until the region is
//! full. The host kills the VM meanwhile.
//!
//! `rpma-power-cut check DEVDAX CYCLE ACKED`: after the reboot, reads the region (plain CPU
//! loads of the devdax mapping) and checks that every record `0..=ACKED` is intact: its
//! checksum, number and cycle. Prints `CHECK cycle C: acknowledged A, intact I, lost L, valid V`
//! (V: the records of the cycle found valid, acknowledged or not) and exits 1 if L > 0.
//! `ACKED` = -1: nothing was acknowledged.
//!
//! `rpma-power-cut bench DEVDAX ROUNDS`: the latency of a persistent flush of 64 bytes just
//! written into the devdax region, native (`IBV_FLUSH_PERSISTENT`) and as the RDMA Read
//! (`PersistentFlush::Read`) in paired rounds on one connection (the rule is read at post time),
//! from the flush's post to its completion (busy polling); prints the medians and their ratio
//! (docs/native-ops.md, "Numbers"; run it under `SOFTROCE_ACCEL=icount`).

#![forbid(unsafe_code)]

use std::process::ExitCode;

/// The bytes of the devdax device the records use (from offset 0).
const REGION: usize = 2 << 20;
/// The size of a record.
const REC: usize = 64;

/// FNV-1a over `b`.
fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3))
}

/// Record `n` of cycle `cycle`: number, cycle, 40 payload bytes, FNV-1a of the first 56 bytes.
fn record(n: u64, cycle: u64) -> [u8; REC] {
    let mut r = [0u8; REC];
    r[..8].copy_from_slice(&n.to_le_bytes());
    r[8..16].copy_from_slice(&cycle.to_le_bytes());
    for (i, b) in r[16..56].iter_mut().enumerate() {
        *b = (n.wrapping_mul(31) ^ cycle.wrapping_mul(7)).wrapping_add(i as u64) as u8;
    }
    let sum = fnv(&r[..56]);
    r[56..].copy_from_slice(&sum.to_le_bytes());
    r
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let result = match args.get(1).map(String::as_str) {
        Some("check") if args.len() == 5 => check(&args[2], &args[3], &args[4]),
        #[cfg(feature = "verbs")]
        Some("write") if args.len() == 4 => write::run(&args[2], &args[3]),
        #[cfg(feature = "verbs")]
        Some("bench") if args.len() == 4 => write::bench(&args[2], &args[3]),
        #[cfg(not(feature = "verbs"))]
        Some("write" | "bench") => Err("built without the verbs feature (cargo build --features verbs)".to_owned()),
        _ => {
            Err("usage: rpma-power-cut write DEVDAX CYCLE | check DEVDAX CYCLE ACKED | bench DEVDAX ROUNDS".to_owned())
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rpma-power-cut: {e}");
            ExitCode::from(2)
        }
    }
}

fn check(path: &str, cycle: &str, acked: &str) -> Result<ExitCode, String> {
    let cycle: u64 = cycle.parse().map_err(|_| format!("bad cycle {cycle}"))?;
    let acked: i64 = acked.parse().map_err(|_| format!("bad ACKED {acked}"))?;
    let mem =
        rpma_testbins::pmem::map(std::path::Path::new(path), 0, REGION).map_err(|e| format!("mapping {path}: {e}"))?;
    let bytes = mem.to_vec();
    let (mut intact, mut lost, mut valid) = (0u64, 0u64, 0u64);
    for (n, r) in bytes.chunks_exact(REC).enumerate() {
        let n = n as u64;
        let ok = r == record(n, cycle);
        valid += u64::from(ok);
        if i64::try_from(n).is_ok_and(|n| n <= acked) {
            if ok {
                intact += 1;
            } else {
                lost += 1;
                if lost <= 5 {
                    eprintln!("LOST record {n} of cycle {cycle}: {r:02x?}");
                }
            }
        }
    }
    println!("CHECK cycle {cycle}: acknowledged {}, intact {intact}, lost {lost}, valid {valid}", acked + 1);
    Ok(if lost == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

#[cfg(feature = "verbs")]
mod write {
    use std::io::Write as _;
    use std::process::ExitCode;
    use std::time::{Duration, Instant};

    use rpma::verbs::Verbs;
    use rpma::{ConnEvent, ConnReq, ContextType, Device, Ep, FlushType, MrRemote, Peer, PeerCfg, Usage, WcStatus};

    use super::{record, REC, REGION};

    fn wait_event(c: &rpma::Conn<Verbs>) -> Result<ConnEvent, String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match c.next_event() {
                Ok(ev) => return Ok(ev),
                Err(e) if e.kind() == rpma::ErrorKind::WouldBlock && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(format!("next_event: {e}")),
            }
        }
    }

    /// A connection to a server region on the devdax device at `path`: (client, remote, source,
    /// and what must outlive them).
    struct Setup {
        client: rpma::Conn<Verbs>,
        remote: MrRemote,
        src: rpma::MrLocal<Verbs>,
        _keep: Keep,
    }

    /// The server's connection, region, endpoint and the two peers.
    type Keep = (rpma::Conn<Verbs>, rpma::MrLocal<Verbs>, Ep<Verbs>, Peer<Verbs>, Peer<Verbs>);

    fn setup(path: &str, port: &str) -> Result<Setup, String> {
        let addr = std::env::var("RPMA_TEST_ADDR").map_err(|_| "RPMA_TEST_ADDR is not set".to_owned())?;
        let e = |what: &'static str| move |err: rpma::Error| format!("{what}: {err}");
        let t = Verbs::new();
        let dev = Device::lookup(&t, &addr, ContextType::Local).map_err(e("Device::lookup"))?;
        let speer = Peer::new(&dev).map_err(e("Peer::new"))?;
        let cpeer = Peer::new(&dev).map_err(e("Peer::new"))?;
        let mem = rpma_testbins::pmem::map(std::path::Path::new(path), 0, REGION)
            .map_err(|err| format!("mapping {path}: {err}"))?;
        let target = speer.reg_mr(mem, Usage::WRITE_DST | Usage::FLUSH_TYPES).map_err(e("reg_mr (pmem)"))?;
        let src = cpeer.alloc_mr(REC, Usage::WRITE_SRC).map_err(e("alloc_mr"))?;
        let ep = Ep::listen(&speer, &addr, port).map_err(e("Ep::listen"))?;
        let client =
            ConnReq::new(&cpeer, &addr, port, None).map_err(e("ConnReq::new"))?.connect(None).map_err(e("connect"))?;
        let req = ep.next_conn_req(None).map_err(e("next_conn_req"))?;
        let server = req.connect(Some(&target.descriptor())).map_err(e("accept"))?;
        for (c, who) in [(&client, "client"), (&server, "server")] {
            let ev = wait_event(c)?;
            if ev != ConnEvent::Established {
                return Err(format!("{who}: {ev:?}"));
            }
        }
        client.apply_remote_peer_cfg(&PeerCfg::new().with_direct_write_to_pmem(true));
        let remote = MrRemote::from_descriptor(client.private_data()).map_err(e("descriptor"))?;
        Ok(Setup { client, remote, src, _keep: (server, target, ep, speer, cpeer) })
    }

    /// Polls `n` successful completions.
    fn wait_wcs(c: &rpma::Conn<Verbs>, n: usize, what: &str) -> Result<(), String> {
        let mut got = 0;
        while got < n {
            if let Some(wc) = c.cq().next_wc().map_err(|e| format!("next_wc: {e}"))? {
                if wc.status() != WcStatus::Success {
                    return Err(format!("{what}: {wc:?}"));
                }
                got += 1;
            }
        }
        Ok(())
    }

    pub fn bench(path: &str, rounds: &str) -> Result<ExitCode, String> {
        use rpma::verbs::{set_persistent_flush, PersistentFlush};
        let rounds: usize = rounds.parse().map_err(|_| format!("bad ROUNDS {rounds}"))?;
        let st = setup(path, "7598")?;
        let e = |what: &'static str| move |err: rpma::Error| format!("{what}: {err}");
        let (mut native, mut read) = (Vec::new(), Vec::new());
        let before = rpma::verbs::op_counts();
        for i in 0..rounds + 5 {
            for (rule, out) in [(PersistentFlush::Native, &mut native), (PersistentFlush::Read, &mut read)] {
                set_persistent_flush(rule);
                let off = (i % 1024) * REC;
                st.src.write(0, &record(i as u64, 0)).map_err(e("write src"))?;
                st.client.write(st.remote.at(off), st.src.slice(0..REC)).context(1).post().map_err(e("write"))?;
                wait_wcs(&st.client, 1, "write")?;
                let t0 = Instant::now();
                st.client
                    .flush(st.remote.slice(off..off + REC), FlushType::Persistent)
                    .context(2)
                    .post()
                    .map_err(e("flush"))?;
                wait_wcs(&st.client, 1, "flush")?;
                if i >= 5 {
                    out.push(t0.elapsed().as_nanos() as f64 / 1000.0); // 5 warm-up rounds
                }
            }
        }
        let after = rpma::verbs::op_counts();
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (n, r) = (median(&mut native), median(&mut read));
        println!(
            "persistent flush of 64 B on pmem, {rounds} paired rounds: native median {n:.1} us, RDMA Read median \
             {r:.1} us, native/read {:.2} (counters: native persistent {}, persistent read {})",
            n / r,
            after.flush_persistent_native - before.flush_persistent_native,
            after.flush_persistent_read - before.flush_persistent_read
        );
        Ok(ExitCode::SUCCESS)
    }

    pub fn run(path: &str, cycle: &str) -> Result<ExitCode, String> {
        let cycle: u64 = cycle.parse().map_err(|_| format!("bad cycle {cycle}"))?;
        let e = |what: &'static str| move |err: rpma::Error| format!("{what}: {err}");
        let Setup { client, remote, src, _keep } = setup(path, "7599")?;
        println!("WRITING cycle {cycle} to {path}, persistent flush {:?}", rpma::verbs::persistent_flush());
        let out = std::io::stdout();
        for n in 0..(REGION / REC) as u64 {
            let off = n as usize * REC;
            src.write(0, &record(n, cycle)).map_err(e("write src"))?;
            client.write(remote.at(off), src.slice(0..REC)).context(1).post().map_err(e("write"))?;
            client.flush(remote.slice(off..off + REC), FlushType::Persistent).context(2).post().map_err(e("flush"))?;
            wait_wcs(&client, 2, &format!("record {n}"))?;
            let mut o = out.lock();
            let _ = writeln!(o, "ACK {n}");
            let _ = o.flush();
        }
        let c = rpma::verbs::op_counts();
        println!("DONE cycle {cycle}: the region is full; native persistent flushes {}", c.flush_persistent_native);
        Ok(ExitCode::SUCCESS)
    }
}
