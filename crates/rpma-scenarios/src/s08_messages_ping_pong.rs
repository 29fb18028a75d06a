//! 08-messages-ping-pong: one 16-byte region per side, the receive slot at offset 0 and the
//! send slot at offset 8 (`MSG_SIZE = 8`). The client sends a `u64` counter (native byte order),
//! the server sends it back incremented; `I_M_DONE = u64::MAX` ends. The server pre-posts its
//! first receive on the connection request (`rpma_conn_req_recv`).
//!
//! The client does `--rounds` round trips (the C client's `while (--rounds)` does one less).
//! Its flow is shared by the SRQ scenarios (`13`, `08srq`), whose servers differ.

use anyhow::{ensure, Result};
use rpma::{Conn, ConnCfg, Ep, MrLocal, Transport, Usage, Wc, WcOpcode};

use super::common::{
    accept, check_wc, client_peer, connect, disconnect_and_wait_close, next_wc, next_wc_shared, server_peer, wait_wc,
};
use super::{run_pair, side, ClientOpts, DemoEnv, Report, ServerOpts};

/// `MSG_SIZE`.
pub const MSG_SIZE: usize = 8;
/// `RECV_OFFSET`.
pub const RECV_OFFSET: usize = 0;
/// `SEND_OFFSET`.
pub const SEND_OFFSET: usize = MSG_SIZE;
/// `I_M_DONE`: the last message.
pub const I_M_DONE: u64 = u64::MAX;
/// The operation context of receives.
pub const RECV_ID: u64 = 0x5EC5;
/// The operation context of sends.
pub const SEND_ID: u64 = 0x5E4D;

/// Where a ping-pong side waits for its completions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completions {
    /// Sends and receives on the main CQ (08).
    Main,
    /// Sends on the main CQ, receives on the connection's receive CQ (12).
    SeparateRcq,
    /// Both CQs on one shared completion channel (12scch).
    SharedChannel,
}

/// The server's report.
#[derive(Debug, Clone, Default)]
pub struct ServerReport {
    /// Values received (without `I_M_DONE`).
    pub received: Vec<u64>,
    /// Values sent back.
    pub sent: Vec<u64>,
}

impl Report for ServerReport {
    fn lines(&self) -> Vec<String> {
        vec![format!("received {:?}, sent back {:?}, then I_M_DONE", self.received, self.sent)]
    }
}

/// The client's report.
#[derive(Debug, Clone, Default)]
pub struct ClientReport {
    /// Values sent (without `I_M_DONE`).
    pub sent: Vec<u64>,
    /// Values received.
    pub received: Vec<u64>,
}

impl Report for ClientReport {
    fn lines(&self) -> Vec<String> {
        vec![format!("sent {:?}, received {:?}, then sent I_M_DONE", self.sent, self.received)]
    }
}

/// Reads the `u64` at `offset` of `mr`.
///
/// # Errors
/// If the range is outside the region.
pub fn get_u64<T: Transport>(mr: &MrLocal<T>, offset: usize) -> Result<u64> {
    let mut b = [0u8; 8];
    mr.read(offset, &mut b)?;
    Ok(u64::from_ne_bytes(b))
}

/// `validate_wc`: a successful send, or a successful receive of `MSG_SIZE` bytes with
/// [`RECV_ID`]; sets the matching flag.
///
/// # Errors
/// If the completion is anything else.
pub fn validate_wc(wc: &Wc, send_done: &mut bool, recv_done: &mut bool) -> Result<()> {
    match wc.opcode() {
        WcOpcode::Send => {
            check_wc(wc, WcOpcode::Send)?;
            *send_done = true;
        }
        _ => {
            check_wc(wc, WcOpcode::Recv)?;
            ensure!(
                wc.wr_id() == RECV_ID && wc.byte_len() as usize == MSG_SIZE,
                "received completion is not as expected ({:#x} != {RECV_ID:#x} [wc.wr_id] || {} != {MSG_SIZE} [wc.byte_len])",
                wc.wr_id(),
                wc.byte_len()
            );
            *recv_done = true;
        }
    }
    Ok(())
}

/// `wait_and_process_completions`: waits until both a send and a receive completed (either
/// flag may already be set).
///
/// # Errors
/// If waiting fails or a completion is unexpected.
pub fn wait_send_and_recv<T: Transport>(
    conn: &Conn<T>,
    mode: Completions,
    send_done: &mut bool,
    recv_done: &mut bool,
) -> Result<()> {
    while !(*send_done && *recv_done) {
        match mode {
            Completions::Main => validate_wc(&next_wc(&conn.cq())?, send_done, recv_done)?,
            Completions::SeparateRcq => {
                if !*send_done {
                    validate_wc(&wait_wc(&conn.cq(), WcOpcode::Send)?, send_done, recv_done)?;
                } else {
                    let rcq = conn.rcq().ok_or_else(|| anyhow::anyhow!("the connection has no receive CQ"))?;
                    validate_wc(&wait_wc(&rcq, WcOpcode::Recv)?, send_done, recv_done)?;
                }
            }
            Completions::SharedChannel => {
                let (wc, from_rcq) = next_wc_shared(conn)?;
                ensure!(from_rcq == (wc.opcode() != WcOpcode::Send), "a {:?} completion on the wrong CQ", wc.opcode());
                validate_wc(&wc, send_done, recv_done)?;
            }
        }
    }
    Ok(())
}

/// The ping-pong server on a connection's own receive queue (08, 12, 12scch).
///
/// # Errors
/// If any step fails.
pub fn serve<T: Transport>(t: &T, o: &ServerOpts, cfg: Option<&ConnCfg<T>>, mode: Completions) -> Result<ServerReport> {
    let peer = server_peer(t, &o.addr)?;
    let ep = Ep::listen(&peer, &o.addr, &o.port)?;
    o.ready.signal();
    let mr = peer.alloc_mr(2 * MSG_SIZE, Usage::RECV | Usage::SEND)?;
    let conn = accept(&ep, &o.stop, cfg, None, |req| {
        Ok(req.recv(mr.slice(RECV_OFFSET..RECV_OFFSET + MSG_SIZE)).context(RECV_ID).post()?)
    })?;
    let mut r = ServerReport::default();
    let (mut send_done, mut recv_done) = (true, false);
    loop {
        wait_send_and_recv(&conn, mode, &mut send_done, &mut recv_done)?;
        let v = get_u64(&mr, RECV_OFFSET)?;
        if v == I_M_DONE {
            break;
        }
        r.received.push(v);
        conn.recv(mr.slice(RECV_OFFSET..RECV_OFFSET + MSG_SIZE)).context(RECV_ID).post()?;
        let reply = v.wrapping_add(1);
        mr.write(SEND_OFFSET, &reply.to_ne_bytes())?;
        conn.send(mr.slice(SEND_OFFSET..SEND_OFFSET + MSG_SIZE)).context(SEND_ID).post()?;
        r.sent.push(reply);
        (send_done, recv_done) = (false, false);
    }
    disconnect_and_wait_close(conn)?;
    mr.dereg()?;
    ep.shutdown()?;
    Ok(r)
}

/// The ping-pong client (08, 12, 12scch, 13, 08srq).
///
/// # Errors
/// If any step fails.
pub fn ping<T: Transport>(t: &T, o: &ClientOpts, cfg: Option<&ConnCfg<T>>, mode: Completions) -> Result<ClientReport> {
    let peer = client_peer(t, &o.addr)?;
    let mr = peer.alloc_mr(2 * MSG_SIZE, Usage::RECV | Usage::SEND)?;
    let conn = connect(&peer, &o.addr, &o.port, cfg, None, o.retries, o.retry_delay)?;
    let mut r = ClientReport::default();
    let mut counter = o.counter;
    for _ in 0..o.rounds {
        conn.recv(mr.slice(RECV_OFFSET..RECV_OFFSET + MSG_SIZE)).context(RECV_ID).post()?;
        mr.write(SEND_OFFSET, &counter.to_ne_bytes())?;
        conn.send(mr.slice(SEND_OFFSET..SEND_OFFSET + MSG_SIZE)).context(SEND_ID).post()?;
        r.sent.push(counter);
        let (mut send_done, mut recv_done) = (false, false);
        wait_send_and_recv(&conn, mode, &mut send_done, &mut recv_done)?;
        counter = get_u64(&mr, RECV_OFFSET)?;
        r.received.push(counter);
    }
    mr.write(SEND_OFFSET, &I_M_DONE.to_ne_bytes())?;
    // Signaled, and its completion awaited before disconnecting (librpma's example posts it
    // with COMPLETION_ON_ERROR and disconnects at once): a disconnect moves the QP to the error
    // state, which flushes a send not yet transmitted, and Linux 6.12's rxe transmits from a
    // workqueue, so the server would never get I_M_DONE (seen on the debian13 Soft-RoCE guest).
    conn.send(mr.slice(SEND_OFFSET..SEND_OFFSET + MSG_SIZE)).context(SEND_ID).post()?;
    let (mut send_done, mut recv_done) = (false, true);
    wait_send_and_recv(&conn, mode, &mut send_done, &mut recv_done)?;
    disconnect_and_wait_close(conn)?;
    mr.dereg()?;
    Ok(r)
}

/// Checks a client's exchange: every value received is the one sent plus one, and each value
/// sent after the first is the one received before.
///
/// # Errors
/// If not.
pub fn check_exchange(c: &ClientReport, rounds: u64, first: u64) -> Result<()> {
    ensure!(c.sent.len() as u64 == rounds && c.received.len() as u64 == rounds, "{rounds} round trips expected: {c:?}");
    ensure!(c.sent.first().map_or(true, |&v| v == first), "first value sent {:?} != {first}", c.sent.first());
    for (i, (s, r)) in c.sent.iter().zip(&c.received).enumerate() {
        ensure!(*r == s.wrapping_add(1), "round {i}: sent {s}, received {r}");
        if let Some(next) = c.sent.get(i + 1) {
            ensure!(next == r, "round {}: sent {next}, last received {r}", i + 1);
        }
    }
    Ok(())
}

/// The server side.
///
/// # Errors
/// If any step fails.
pub fn server<T: Transport>(t: &T, o: &ServerOpts) -> Result<ServerReport> {
    serve(t, o, None, Completions::Main)
}

/// The client side (`--counter`, `--rounds`).
///
/// # Errors
/// If any step fails.
pub fn client<T: Transport>(t: &T, o: &ClientOpts) -> Result<ClientReport> {
    ping(t, o, None, Completions::Main)
}

/// Both sides in one process: the server must have answered each value with its successor.
///
/// # Errors
/// If a side fails or a value is wrong.
pub fn demo<T: Transport>(t: &T, env: &DemoEnv) -> Result<Vec<String>> {
    let (ts, tc) = (t.clone(), t.clone());
    let so = env.server();
    let mut co = env.client();
    co.counter = 7;
    co.rounds = 3;
    let (s, c) =
        run_pair(move |ready| server(&ts, &ServerOpts { ready, ..so }), vec![Box::new(move || client(&tc, &co))])?;
    check_exchange(&c[0], 3, 7)?;
    ensure!(s.received == c[0].sent && s.sent == c[0].received, "server {s:?} vs client {:?}", c[0]);
    Ok([side("server", &s), side("client", &c[0])].concat())
}
