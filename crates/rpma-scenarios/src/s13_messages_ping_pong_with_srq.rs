//! 13-messages-ping-pong-with-srq: the ping-pong of 08 with several clients served through one
//! shared receive queue. The server keeps an 8-byte receive slot and an 8-byte send slot per
//! client (up to 10), posts one SRQ receive per accepted client (`rpma_srq_recv`, the slot as
//! operation context) and polls the SRQ's receive CQ: the completion's `qp_num` says which
//! connection a message came from, its `wr_id` which slot it landed in (an SRQ hands out
//! buffers in no particular order); the answer goes from the same send slot.
//!
//! The C server stops accepting after 5 s without a new request; this one accepts `--clients N`
//! connections, then serves them. Deviation: the C server sends unsignaled; this one sends
//! signaled and waits for each send's completion before its slot can be written again: a slot
//! serves whichever client's message the SRQ put in it, so an answer still in flight would
//! otherwise be overwritten by the next client's (seen on Soft-RoCE with kernel 6.12: a client
//! received another client's answer). It also means no number of rounds exhausts a send queue.

use anyhow::{bail, ensure, Context, Result};
use rpma::{ConnCfg, ConnEvent, Ep, Srq, Transport, Usage, Wc, WcOpcode};

use super::common::{accept, check_wc, disconnect_and_wait_close, next_wc_or_event, server_peer, wait_or_event};
use super::s08_messages_ping_pong::{check_exchange, get_u64, ClientReport, Completions, I_M_DONE, MSG_SIZE, SEND_ID};
use super::{run_pair, side, ClientFn, ClientOpts, DemoEnv, Report, ServerOpts};

/// `CLIENT_MAX`.
pub const CLIENT_MAX: usize = 10;

/// The server's report.
#[derive(Debug, Clone, Default)]
pub struct ServerReport {
    /// Values received, per connection (in acceptance order).
    pub received: Vec<Vec<u64>>,
}

impl Report for ServerReport {
    fn lines(&self) -> Vec<String> {
        let mut v = vec![format!("{} clients through one SRQ", self.received.len())];
        v.extend(
            self.received.iter().enumerate().map(|(i, r)| format!("connection #{i}: received {r:?}, answered each +1")),
        );
        v
    }
}

/// The server side (`--clients N`, 1 to 10).
///
/// # Errors
/// If `clients` is out of range, any step fails, or a completion names an unknown QP or slot.
pub fn server<T: Transport>(t: &T, o: &ServerOpts) -> Result<ServerReport> {
    let n = o.clients;
    ensure!((1..=CLIENT_MAX).contains(&n), "--clients must be 1 to {CLIENT_MAX}");
    let peer = server_peer(t, &o.addr)?;
    let srq = Srq::new(&peer, None)?;
    let cfg = ConnCfg::new().with_srq(Some(&srq));
    let recv = peer.alloc_mr(CLIENT_MAX * MSG_SIZE, Usage::RECV)?;
    let send = peer.alloc_mr(CLIENT_MAX * MSG_SIZE, Usage::SEND)?;
    let ep = Ep::listen(&peer, &o.addr, &o.port)?;
    o.ready.signal();
    let mut conns = Vec::new();
    for slot in 0..n {
        srq.recv(recv.slice(slot * MSG_SIZE..(slot + 1) * MSG_SIZE)).context(slot as u64).post()?;
        let conn = accept(&ep, &o.stop, Some(&cfg), None, |_| Ok(()))?;
        let qp = conn.qp_num();
        conns.push((conn, qp));
    }
    let rcq = srq.rcq().context("the SRQ has no receive CQ")?;
    let mut r = ServerReport { received: vec![Vec::new(); n] };
    let mut done = 0;
    let mut finished = vec![false; n];
    let mut gone: Vec<Option<ConnEvent>> = vec![None; n];
    let mut event_pending: Option<usize> = None;
    let mut wcs = [Wc::EMPTY; CLIENT_MAX];
    while done < n {
        let got = rcq.poll(&mut wcs[..n])?;
        if got == 0 {
            // A client that goes away while still exchanging ends the wait (its receives are
            // the SRQ's: nothing is flushed to this CQ) once every such client is gone and
            // nothing is left to take; finished ones close normally.
            let waiting: Vec<usize> = (0..n).filter(|&i| !finished[i] && gone[i].is_none()).collect();
            if waiting.is_empty() {
                let (i, ev) = (0..n).find_map(|i| gone[i].map(|ev| (i, ev))).context("no connection left")?;
                bail!("connection #{i} reported {ev} while waiting for a completion");
            }
            // A connection with an event pending is taken as gone only when no completion
            // (sent before it went) is left to take.
            if let Some(i) = event_pending.take() {
                gone[i] = Some(conns[i].0.next_event()?);
                continue;
            }
            let live: Vec<_> = waiting.iter().map(|&i| &conns[i].0).collect();
            event_pending = wait_or_event(&rcq, &live)?.map(|j| waiting[j]);
            continue;
        }
        for wc in &wcs[..got] {
            check_wc(wc, WcOpcode::Recv)?;
            let Some(idx) = conns.iter().position(|(_, qp)| *qp == wc.qp_num()) else {
                bail!("a completion of an unknown QP {}", wc.qp_num());
            };
            let slot = usize::try_from(wc.wr_id())?;
            ensure!(slot < n && wc.byte_len() as usize == MSG_SIZE, "unexpected receive completion {wc:?}");
            let v = get_u64(&recv, slot * MSG_SIZE)?;
            if v == I_M_DONE {
                done += 1;
                finished[idx] = true;
                continue;
            }
            r.received[idx].push(v);
            srq.recv(recv.slice(slot * MSG_SIZE..(slot + 1) * MSG_SIZE)).context(slot as u64).post()?;
            send.write(slot * MSG_SIZE, &v.wrapping_add(1).to_ne_bytes())?;
            let conn = &conns[idx].0;
            conn.send(send.slice(slot * MSG_SIZE..(slot + 1) * MSG_SIZE)).context(SEND_ID).post()?;
            // The slot is reused by the next message the SRQ puts in it, maybe another client's:
            // the answer must have left before it is overwritten.
            let wc = next_wc_or_event(&conn.cq(), conn)?;
            check_wc(&wc, WcOpcode::Send)?;
        }
    }
    for ((conn, _), ev) in conns.into_iter().zip(gone) {
        match ev {
            // The client closed first and its CLOSED was taken while waiting above.
            Some(ConnEvent::Closed) => {
                conn.disconnect()?;
                conn.delete()?;
            }
            Some(ev) => bail!("rpma_conn_next_event returned an unexpected event: {ev}"),
            None => disconnect_and_wait_close(conn)?,
        }
    }
    ep.shutdown()?;
    recv.dereg()?;
    send.dereg()?;
    srq.delete()?;
    Ok(r)
}

/// The client side: the client of 08.
///
/// # Errors
/// If any step fails.
pub fn client<T: Transport>(t: &T, o: &ClientOpts) -> Result<ClientReport> {
    super::s08_messages_ping_pong::ping(t, o, None, Completions::Main)
}

/// Three clients and the server in one process.
///
/// # Errors
/// If a side fails or a value is wrong.
pub fn demo<T: Transport>(t: &T, env: &DemoEnv) -> Result<Vec<String>> {
    let ts = t.clone();
    let mut so = env.server();
    so.clients = 3;
    let clients: Vec<ClientFn<ClientReport>> = (0..3u64)
        .map(|i| {
            let tc = t.clone();
            let mut co = env.client();
            co.counter = 1000 * (i + 1);
            co.rounds = 3;
            Box::new(move || client(&tc, &co)) as ClientFn<ClientReport>
        })
        .collect();
    let (s, c) = run_pair(move |ready| server(&ts, &ServerOpts { ready, ..so }), clients)?;
    for (i, c) in c.iter().enumerate() {
        check_exchange(c, 3, 1000 * (i as u64 + 1))?;
    }
    let mut got: Vec<Vec<u64>> = s.received.clone();
    let mut sent: Vec<Vec<u64>> = c.iter().map(|c| c.sent.clone()).collect();
    got.sort();
    sent.sort();
    ensure!(got == sent, "server received {got:?}, clients sent {sent:?}");
    let mut v = side("server", &s);
    for (i, c) in c.iter().enumerate() {
        v.extend(side(&format!("client #{i}"), c));
    }
    Ok(v)
}
