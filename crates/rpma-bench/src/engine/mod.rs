//! The measurement: server and client sides, generic over the transport.
//!
//! Protocol: the client's connection private data says what it needs (a [`protocol::Request`]:
//! the largest operation on the target region, queue depth, the largest message the server
//! receives and the largest it sends, with the descriptor of the client's inbox, the region the
//! server writes into for `write-pingpong`; see `Footprint`); the server answers with the
//! descriptor of its target region and its peer configuration (direct write to PMem, so
//! persistent flushes are allowed). The client keeps `qd` receives posted, the server `qd + 1`
//! (it echoes before re-posting the receive it consumed); the server echoes every message with
//! a send of the same size and stops serving a connection on a zero-length send with immediate
//! data [`STOP_IMM`](protocol::STOP_IMM), after which the client disconnects.
//!
//! A `write-pingpong` phase starts with a zero-length send with immediate data
//! [`PINGPONG_BIT`](protocol::PINGPONG_BIT)` | size`: the server clears the last byte of the message in its target
//! region and answers with a zero-length send. Then the client writes `size` bytes whose last
//! byte is the iteration number (mod 256) into the server's target region at offset 0; the
//! server polls that byte in its memory and, on the next number, writes `size` bytes with the
//! same last byte into the client's inbox, which the client polls (perftest's `ib_write_lat`
//! scheme). The client ends the phase by writing the number after the next one.

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context, Result};
use rpma::any::Backend;
use rpma::{ContextType, Device, Ep, Peer, Transport};

use super::op::Op;
use super::plan::{Plan, Role};
use super::report::{BenchReport, RunResult, SCHEMA_VERSION};
use rpma_scenarios::common::MapFile;
use rpma_scenarios::native::Source;

mod async_lane;
mod client;
mod driver;
mod lane;
mod progress;
mod protocol;
mod server;
mod setup;
mod wait;

/// The server side of `plan`: connection setup's ([`setup::serve`]) or the operations' (its
/// `--pmem` mapped by `map`).
fn run_server<T: Transport>(
    peer: &Peer<T>,
    ep: &Ep<T>,
    plan: &Plan,
    map: Option<MapFile>,
    abort: &AtomicBool,
) -> Result<()> {
    if plan.ops == [Op::Connect] {
        setup::serve(ep, plan, abort)
    } else {
        server::run_server(peer, ep, plan, map, abort)
    }
}

/// The client side of `plan`: connection setup's ([`setup::run_client`]) or the operations'.
fn run_client<T: Transport>(peer: &Peer<T>, plan: &Plan, addr: &str, port: u16) -> Result<Vec<RunResult>> {
    if plan.ops == [Op::Connect] {
        setup::run_client(peer, plan, addr, port)
    } else {
        client::run_client(peer, plan, addr, port)
    }
}

/// Where the report's `op_path`s come from on transport `T`.
fn op_path_source<T: Transport>() -> Source {
    if rpma_scenarios::native::op_counts::<T>().is_some() {
        Source::Counters
    } else {
        Source::Capabilities
    }
}

/// Runs `plan` on `transport`, the server's `--pmem` mapped by `map`.
pub(super) fn run<T: Transport>(
    transport: &T,
    plan: &Plan,
    backend: Backend,
    map: Option<MapFile>,
) -> Result<BenchReport> {
    let report = |device: String, results| BenchReport {
        schema: SCHEMA_VERSION,
        backend: backend.name(),
        device,
        op_path_source: op_path_source::<T>(),
        results,
    };
    let port = plan.port.to_string();
    match &plan.role {
        Role::Server => {
            let dev = Device::lookup(transport, &plan.addr, ContextType::Local)
                .with_context(|| format!("no RDMA device owns {}", plan.addr))?;
            let peer = Peer::new(&dev).context("creating the peer")?;
            let ep =
                Ep::listen(&peer, &plan.addr, &port).with_context(|| format!("listening on {}:{port}", plan.addr))?;
            if plan.ops == [Op::Connect] {
                rpma_scenarios::stderr::err_line(format_args!(
                    "rpma bench: serving connection setups (--op connect) on {}:{port}",
                    plan.addr
                ));
            } else {
                rpma_scenarios::stderr::err_line(format_args!(
                    "rpma bench: serving {} connection(s) on {}:{port}",
                    plan.conns, plan.addr
                ));
            }
            run_server(&peer, &ep, plan, map, &AtomicBool::new(false))?;
            ep.shutdown().context("shutting the endpoint down")?;
            Ok(report(dev.name(), Vec::new()))
        }
        Role::Client { addr, port } => {
            let dev = Device::lookup(transport, addr, ContextType::Remote)
                .with_context(|| format!("no RDMA device routes to {addr}"))?;
            let peer = Peer::new(&dev).context("creating the peer")?;
            let results = run_client(&peer, plan, addr, *port)?;
            Ok(report(dev.name(), results))
        }
        Role::Loopback => {
            let sdev = Device::lookup(transport, &plan.addr, ContextType::Local)
                .with_context(|| format!("no RDMA device owns {}", plan.addr))?;
            let server_peer = Peer::new(&sdev).context("creating the server's peer")?;
            let ep = Ep::listen(&server_peer, &plan.addr, &port)
                .with_context(|| format!("listening on {}:{port}", plan.addr))?;
            let cdev = Device::lookup(transport, &plan.addr, ContextType::Remote)
                .with_context(|| format!("no RDMA device routes to {}", plan.addr))?;
            let peer = Peer::new(&cdev).context("creating the client's peer")?;
            let abort = AtomicBool::new(false);
            let (client, server) = std::thread::scope(|sc| {
                let server = sc.spawn(|| run_server(&server_peer, &ep, plan, map, &abort));
                let client = run_client(&peer, plan, &plan.addr, plan.port);
                if client.is_err() {
                    abort.store(true, Ordering::Release);
                }
                (client, server.join().unwrap_or_else(|_| bail!("the server thread panicked")))
            });
            let results = match (client, server) {
                (Ok(results), Ok(())) => results,
                (Ok(_), Err(s)) => return Err(s.context("server")),
                (Err(c), Err(s)) if s.downcast_ref::<wait::ClientGaveUp>().is_none() => {
                    // The server failed too, maybe first (a rejection is all the client sees).
                    return Err(anyhow::anyhow!("{c:#}; the server failed: {s:#}"));
                }
                (Err(c), _) => return Err(c),
            };
            ep.shutdown().context("shutting the endpoint down")?;
            Ok(report(cdev.name(), results))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::client::{op_path, Totals};
    use super::protocol::{parse_request, region_len, request_pdata, slot_offset, Request, MAX_REGION};
    use crate::op::Op;
    use crate::plan::MAX_QD;
    use crate::sizes::MAX_SIZE;
    use rpma::MrRemote;
    use rpma_scenarios::native::{OpCounts, OpPath};
    use std::time::Duration;

    /// A region descriptor: 64 bytes, usage 1.
    const DESC: [u8; MrRemote::DESCRIPTOR_SIZE] = {
        let mut d = [0u8; MrRemote::DESCRIPTOR_SIZE];
        d[8] = 64;
        d[MrRemote::DESCRIPTOR_SIZE - 1] = 1;
        d
    };

    #[test]
    fn requests_round_trip_and_are_bounded() {
        let remote = MrRemote::from_descriptor(&DESC).unwrap();
        let req = |target_max, qd, recv_max, source_max| Request { target_max, qd, recv_max, source_max };
        let (r, inbox) = parse_request(&request_pdata(req(4096, 16, 64, 128), &DESC)).unwrap();
        assert_eq!((r, inbox.len()), (req(4096, 16, 64, 128), remote.len()));
        let mut padded = request_pdata(req(8, 1, 0, 0), &DESC).to_vec();
        padded.resize(56, 0);
        assert_eq!(parse_request(&padded).unwrap().0, req(8, 1, 0, 0));
        assert!(parse_request(&[1, 2, 3]).is_err());
        assert!(parse_request(&request_pdata(req(8, 1, 0, 0), &DESC)[..20]).is_err(), "no inbox");
        assert!(parse_request(&request_pdata(req(8, 1, 0, 0), &DESC)[..36]).is_err(), "no sizes");
        assert!(
            parse_request(&request_pdata(req(8, 1, 0, 0), &[0; MrRemote::DESCRIPTOR_SIZE])).is_err(),
            "a bad inbox"
        );
        assert!(parse_request(&request_pdata(req(0, 1, 0, 0), &DESC)).is_ok(), "a send-only run: no target");
        assert!(parse_request(&request_pdata(req(8, 0, 0, 0), &DESC)).is_err());
        assert!(parse_request(&request_pdata(req(MAX_SIZE + 1, 1, 0, 0), &DESC)).is_err());
        assert!(parse_request(&request_pdata(req(8, 1, MAX_SIZE + 1, 0), &DESC)).is_err());
        assert!(parse_request(&request_pdata(req(8, MAX_QD + 1, 0, 0), &DESC)).is_err());
    }

    #[test]
    fn the_path_of_a_run_comes_from_the_counters_or_the_capabilities() {
        let mut caps = rpma::Capabilities::roce_defaults();
        assert_eq!(op_path(Op::Write, 10, &caps, None, None), None);
        assert_eq!(op_path(Op::Flush, 10, &caps, None, None), Some(OpPath::Emulated));
        caps.native_flush = true;
        assert_eq!(op_path(Op::WriteFlush, 10, &caps, None, None), Some(OpPath::Native));
        assert_eq!(op_path(Op::AtomicWrite, 10, &caps, None, None), Some(OpPath::Emulated));
        // With counters (verbs), only the difference counts, and only the run's own kind.
        let before = OpCounts { flush_emulated: 7, atomic_write_native: 3, ..OpCounts::default() };
        let after = OpCounts { flush_persistent_read: 110, atomic_write_native: 9, ..before };
        assert_eq!(op_path(Op::Flush, 100, &caps, Some(before), Some(after)), Some(OpPath::PersistentRead));
        assert_eq!(op_path(Op::AtomicWrite, 100, &caps, Some(before), Some(after)), Some(OpPath::Native));
        assert_eq!(op_path(Op::Read, 100, &caps, Some(before), Some(after)), None);
    }

    #[test]
    fn slots_stay_inside_the_region() {
        for (slot, size, region) in [(0, 8, 8), (3, 8, 64), (7, 8, 64), (8, 8, 64), (100, 4096, 8192)] {
            let off = slot_offset(slot, size, region);
            assert!(off + size <= region, "{slot} {size} {region}");
        }
        assert_eq!(slot_offset(3, 8, 64), 24);
        assert_eq!(region_len(8, 4), 32);
        assert_eq!(region_len(1 << 30, 4), 1 << 30);
        assert_eq!(region_len(1 << 20, 1024), MAX_REGION);
    }

    #[test]
    fn the_rate_is_all_operations_over_the_phase_s_wall_time() {
        let t0 = std::time::Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        // Two threads of 1000 operations: one from 0 to 10 ms, one from 5 to 40 ms. The phase
        // lasts 40 ms: 2000 operations over 40 ms (50k/s); not 100k/s + 28.6k/s (the sum of
        // the threads' rates), not 2000 over the slowest thread's 35 ms.
        let t = Totals::of(&[(1000, at(0), at(10)), (1000, at(5), at(40))]);
        assert_eq!(t.ops, 2000);
        assert!((t.secs - 0.04).abs() < 1e-9, "{}", t.secs);
        assert!((t.rate - 50_000.0).abs() < 1e-3, "{}", t.rate);
        let one = Totals::of(&[(500, at(10), at(60))]);
        assert!((one.rate - 10_000.0).abs() < 1e-3);
        assert_eq!(Totals::of(&[]).ops, 0);
    }
}
