//! `--op connect`: connection setup as the measured operation. The client connects, waits
//! for the connection to be established, disconnects, waits for it to close and deletes it,
//! one connection after another; the server accepts each, waits for it to close, disconnects
//! and deletes it. No memory is registered and nothing is posted: what is measured is the
//! connection management of the library (and of the provider under it), per connection.
//!
//! The queues are sized as the C program's (benches/c/librpma_bench.c) are: the client's for
//! queue depth 1, the server's for [`SERVER_QD`] (it sizes them before it sees a request). A
//! request's private data says which connection it is: [`SETUP`] a measured (or warm-up) one,
//! [`STOP`] the last, after which the server returns.

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use rpma::{Conn, ConnEvent, ConnReq, Ep, Peer, Transport};

use super::protocol::{conn_cfg, new_histogram};
use super::wait;
use crate::op::Op;
use crate::plan::{Amount, Plan};
use crate::report::{Latency, RunResult};

/// The private data of a connection of the measurement (or of its warm-up). A server may see
/// it padded (RDMA CM delivers 56 bytes): only the first [`MARK_LEN`] bytes count.
pub(super) const SETUP: &[u8; MARK_LEN] = b"rpma-bench setup";
/// The private data of the last connection: the server returns once it has closed.
pub(super) const STOP: &[u8; MARK_LEN] = b"rpma-bench stop.";
/// The length of [`SETUP`] and [`STOP`].
pub(super) const MARK_LEN: usize = 16;
/// The queue depth the server's queues are sized for (as the C program's server's).
pub(super) const SERVER_QD: usize = 128;

/// Waits for `conn`'s next event and fails unless it is `want`.
fn expect<T: Transport>(conn: &Conn<T>, want: ConnEvent, plan: &Plan, what: &str) -> Result<()> {
    match wait::next_event(conn, plan.timeout, what)? {
        ev if ev == want => Ok(()),
        ev if want == ConnEvent::Established => bail!("{what}: {}", rpma_scenarios::common::not_established(ev)),
        ev => bail!("{what}: connection event {ev:?}, expected {want:?}"),
    }
}

/// The client side: `--warmup` connections, then the measured ones, then the last ([`STOP`]).
pub(super) fn run_client<T: Transport>(peer: &Peer<T>, plan: &Plan, addr: &str, port: u16) -> Result<Vec<RunResult>> {
    let cfg = conn_cfg::<T>(1, plan.retry);
    let port = port.to_string();
    let one = |pdata: &[u8; MARK_LEN]| -> Result<()> {
        let req = ConnReq::new(peer, addr, &port, Some(&cfg)).context("client: creating a connection request")?;
        let conn = req.connect(Some(&pdata[..])).context("client: connecting")?;
        expect(&conn, ConnEvent::Established, plan, &format!("client: waiting for the connection to {addr}:{port}"))?;
        conn.disconnect().context("client: disconnecting")?;
        expect(&conn, ConnEvent::Closed, plan, "client: waiting for the connection to close")?;
        conn.delete().context("client: deleting the connection")
    };
    for _ in 0..plan.warmup {
        one(SETUP)?;
    }
    let mut hist = new_histogram();
    let mut ops = 0u64;
    let start = Instant::now();
    loop {
        let done = match plan.amount {
            Amount::Iters(n) => ops >= n,
            Amount::Duration(d) => ops > 0 && start.elapsed() >= d,
        };
        if done {
            break;
        }
        let t = Instant::now();
        one(SETUP)?;
        if plan.latency {
            hist.saturating_record(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
        }
        ops += 1;
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    one(STOP)?;
    let rate = ops as f64 / secs;
    Ok(vec![RunResult {
        op: Op::Connect.name(),
        size: 0,
        qd: 1,
        conns: 1,
        threads: 1,
        batch: 1,
        sge: 1,
        inline: false,
        api: "sync",
        ops,
        elapsed_s: secs,
        latency_kind: if plan.latency { "connection" } else { "none" },
        latency_ns: plan.latency.then(|| Latency::of(&hist)),
        mb_s: 0.0,
        gb_s: 0.0,
        msg_rate: rate,
        baseline: None,
        op_path: None,
    }])
}

/// The server side: accepts connections until the one marked [`STOP`] has closed.
pub(super) fn serve<T: Transport>(ep: &Ep<T>, plan: &Plan, abort: &AtomicBool) -> Result<()> {
    let cfg = conn_cfg::<T>(SERVER_QD, plan.retry);
    loop {
        wait::conn_request(ep, abort)?;
        let req = ep.next_conn_req(Some(&cfg)).context("server: receiving a connection request")?;
        let pd = req.private_data();
        let stop = match pd.get(..MARK_LEN) {
            Some(m) if m == SETUP => false,
            Some(m) if m == STOP => true,
            _ => {
                let n = pd.len();
                let _ = req.delete();
                bail!(
                    "server: a connection request with {n} bytes of private data that are not `rpma bench --op \
                     connect`'s: run the client with --op connect too"
                );
            }
        };
        let conn = req.connect(None).context("server: accepting a connection")?;
        expect(&conn, ConnEvent::Established, plan, "server: waiting for the connection to be established")?;
        expect(&conn, ConnEvent::Closed, plan, "server: waiting for the client to disconnect")?;
        conn.disconnect().context("server: disconnecting")?;
        conn.delete().context("server: deleting the connection")?;
        if stop {
            return Ok(());
        }
    }
}
