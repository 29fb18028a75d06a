//! 08srq-simple-messages-ping-pong-with-srq: the ping-pong of 08 with the server's receives
//! posted to a shared receive queue (`rpma_srq_recv`) for its one connection. Where the receive
//! completions land is chosen like the C server's third argument (`--srq-rcq`): the SRQ's own
//! receive CQ (`s`, default), the connection's main CQ (`m`: the SRQ is created without a
//! receive CQ) or the connection's own receive CQ (`r`, `rcq_size = 10`). The server checks that
//! each receive completion carries its connection's QP number.
//!
//! Deviation: the C server sends unsignaled; this one sends signaled and collects the send
//! completions (so no number of rounds can exhaust the send queue).

use anyhow::{ensure, Context, Result};
use rpma::{ConnCfg, Ep, Srq, SrqCfg, Transport, Usage, WcOpcode};

use super::common::{accept, check_wc, disconnect_and_wait_close, drain, next_wc, next_wc_or_event, server_peer};
use super::s08_messages_ping_pong::{
    check_exchange, get_u64, validate_wc, ClientReport, Completions, I_M_DONE, MSG_SIZE, RECV_ID, RECV_OFFSET, SEND_ID,
    SEND_OFFSET,
};
use super::{run_pair, side, ClientOpts, DemoEnv, Report, ServerOpts, SrqRcq};

/// `RCQ_SIZE` of the connection's receive CQ in mode `r`.
pub const RCQ_SIZE: u32 = 10;

/// The server's report.
#[derive(Debug, Clone)]
pub struct ServerReport {
    /// Where receive completions landed.
    pub mode: SrqRcq,
    /// Values received.
    pub received: Vec<u64>,
}

impl Report for ServerReport {
    fn lines(&self) -> Vec<String> {
        let cq = match self.mode {
            SrqRcq::Srq => "the SRQ's receive CQ",
            SrqRcq::Main => "the connection's main CQ",
            SrqRcq::Conn => "the connection's receive CQ",
        };
        vec![format!("received {:?} through the SRQ (completions on {cq}), answered each +1", self.received)]
    }
}

/// The server side (`--srq-rcq srq|main|conn`).
///
/// # Errors
/// If any step fails or a completion carries another QP number.
pub fn server<T: Transport>(t: &T, o: &ServerOpts) -> Result<ServerReport> {
    let peer = server_peer(t, &o.addr)?;
    let mut srq_cfg = SrqCfg::new();
    if o.srq_rcq != SrqRcq::Srq {
        srq_cfg = srq_cfg.with_rcq_size(0);
    }
    let srq = Srq::new(&peer, Some(&srq_cfg))?;
    let mut cfg = ConnCfg::new().with_srq(Some(&srq));
    if o.srq_rcq == SrqRcq::Conn {
        cfg = cfg.with_rcq_size(RCQ_SIZE);
    }
    let ep = Ep::listen(&peer, &o.addr, &o.port)?;
    o.ready.signal();
    let mr = peer.alloc_mr(2 * MSG_SIZE, Usage::RECV | Usage::SEND)?;
    srq.recv(mr.slice(RECV_OFFSET..RECV_OFFSET + MSG_SIZE)).context(RECV_ID).post()?;
    let conn = accept(&ep, &o.stop, Some(&cfg), None, |_| Ok(()))?;
    let qp_num = conn.qp_num();
    let mut received = Vec::new();
    loop {
        let wc = loop {
            let wc = match o.srq_rcq {
                SrqRcq::Srq => next_wc_or_event(&srq.rcq().context("the SRQ has no receive CQ")?, &conn)?,
                SrqRcq::Main => next_wc(&conn.cq())?,
                SrqRcq::Conn => next_wc(&conn.rcq().context("the connection has no receive CQ")?)?,
            };
            if wc.opcode() == WcOpcode::Send {
                check_wc(&wc, WcOpcode::Send)?;
                continue;
            }
            break wc;
        };
        let (mut s, mut r) = (true, false);
        validate_wc(&wc, &mut s, &mut r)?;
        ensure!(
            wc.qp_num() == qp_num,
            "number of QP (qp_num) in the received completion ({}) differs from the one of the connection ({qp_num})",
            wc.qp_num()
        );
        let v = get_u64(&mr, RECV_OFFSET)?;
        if v == I_M_DONE {
            break;
        }
        received.push(v);
        srq.recv(mr.slice(RECV_OFFSET..RECV_OFFSET + MSG_SIZE)).context(RECV_ID).post()?;
        mr.write(SEND_OFFSET, &v.wrapping_add(1).to_ne_bytes())?;
        conn.send(mr.slice(SEND_OFFSET..SEND_OFFSET + MSG_SIZE)).context(SEND_ID).post()?;
        if o.srq_rcq != SrqRcq::Main {
            drain(&conn.cq())?;
        }
    }
    disconnect_and_wait_close(conn)?;
    ep.shutdown()?;
    mr.dereg()?;
    srq.delete()?;
    Ok(ServerReport { mode: o.srq_rcq, received })
}

/// The client side: the client of 08.
///
/// # Errors
/// If any step fails.
pub fn client<T: Transport>(t: &T, o: &ClientOpts) -> Result<ClientReport> {
    super::s08_messages_ping_pong::ping(t, o, None, Completions::Main)
}

/// Both sides in one process, once per completion placement (`s`, `m`, `r`).
///
/// # Errors
/// If a side fails or a value is wrong.
pub fn demo<T: Transport>(t: &T, env: &DemoEnv) -> Result<Vec<String>> {
    let mut v = Vec::new();
    for mode in [SrqRcq::Srq, SrqRcq::Main, SrqRcq::Conn] {
        let (ts, tc) = (t.clone(), t.clone());
        let mut so = env.server();
        so.srq_rcq = mode;
        let mut co = env.client();
        co.counter = 20;
        co.rounds = 3;
        let (s, c) =
            run_pair(move |ready| server(&ts, &ServerOpts { ready, ..so }), vec![Box::new(move || client(&tc, &co))])?;
        check_exchange(&c[0], 3, 20)?;
        ensure!(s.received == c[0].sent, "server received {:?}, client sent {:?}", s.received, c[0].sent);
        v.extend([side("server", &s), side("client", &c[0])].concat());
    }
    Ok(v)
}
