//! 10-send-with-imm: the client puts the immediate data it will send (`u32`, native byte order)
//! in the connect private data, then sends its word (a 1 KiB message) with that immediate data,
//! or a 0-byte message carrying only the immediate data if no word is given; the server
//! pre-posts a 1 KiB receive on the request and compares the immediate data it received with
//! the one announced.

use anyhow::{ensure, Context, Result};
use rpma::{Ep, Transport, Usage, WcOpcode};

use super::common::{
    accept, client_peer, connect, cstr, disconnect_and_wait_close, server_peer, wait_close_and_disconnect, wait_wc,
    KILOBYTE,
};
use super::{run_pair, side, ClientOpts, DemoEnv, Report, ServerOpts};

/// The server's report.
#[derive(Debug, Clone)]
pub struct ServerReport {
    /// The immediate data announced in the private data.
    pub expected: u32,
    /// The immediate data received.
    pub imm: u32,
    /// The message received (empty for a 0-byte send).
    pub value: String,
    /// Bytes received.
    pub bytes: u32,
}

impl Report for ServerReport {
    fn lines(&self) -> Vec<String> {
        vec![format!(
            "received value {:?} ({} bytes) with immediate data {} (announced {})",
            self.value, self.bytes, self.imm, self.expected
        )]
    }
}

/// The client's report.
#[derive(Debug, Clone)]
pub struct ClientReport {
    /// The immediate data sent.
    pub imm: u32,
    /// The word sent, if any.
    pub word: Option<String>,
}

impl Report for ClientReport {
    fn lines(&self) -> Vec<String> {
        vec![match &self.word {
            Some(w) => format!("sent value {w:?} with immediate data {}", self.imm),
            None => format!("sent immediate data {} (0-byte message)", self.imm),
        }]
    }
}

/// The server side.
///
/// # Errors
/// If any step fails or the immediate data differs from the announced one.
pub fn server<T: Transport>(t: &T, o: &ServerOpts) -> Result<ServerReport> {
    let peer = server_peer(t, &o.addr)?;
    let ep = Ep::listen(&peer, &o.addr, &o.port)?;
    o.ready.signal();
    let recv = peer.alloc_mr(KILOBYTE, Usage::RECV)?;
    let conn = accept(&ep, &o.stop, None, None, |req| Ok(req.recv(recv.slice(..KILOBYTE)).post()?))?;
    let pdata = conn.private_data();
    ensure!(pdata.len() >= 4, "received connection's private data is too small ({} < 4)", pdata.len());
    let expected = u32::from_ne_bytes(pdata[..4].try_into()?);
    let wc = wait_wc(&conn.cq(), WcOpcode::Recv)?;
    let imm = wc.imm_data().context("received no immediate data")?;
    ensure!(imm == expected, "received immediate data {imm} != announced {expected}");
    let value = if wc.byte_len() == 0 { String::new() } else { cstr(&recv.to_vec(0, KILOBYTE)?) };
    wait_close_and_disconnect(conn)?;
    recv.dereg()?;
    ep.shutdown()?;
    Ok(ServerReport { expected, imm, value, bytes: wc.byte_len() })
}

/// The client side (`--imm N`, optionally `--word W`).
///
/// # Errors
/// If any step fails.
pub fn client<T: Transport>(t: &T, o: &ClientOpts) -> Result<ClientReport> {
    let word = o.words.first().cloned();
    let peer = client_peer(t, &o.addr)?;
    let send = match &word {
        Some(w) => {
            let mr = peer.alloc_mr(KILOBYTE, Usage::SEND)?;
            let b = w.as_bytes();
            mr.write(0, &b[..b.len().min(KILOBYTE - 1)])?;
            Some(mr)
        }
        None => None,
    };
    let conn = connect(&peer, &o.addr, &o.port, None, Some(&o.imm.to_ne_bytes()), o.retries, o.retry_delay)?;
    match &send {
        Some(mr) => conn.send(mr.slice(..KILOBYTE)).imm(o.imm).post()?,
        None => conn.send_empty().imm(o.imm).post()?,
    }
    wait_wc(&conn.cq(), WcOpcode::Send)?;
    disconnect_and_wait_close(conn)?;
    if let Some(mr) = send {
        mr.dereg()?;
    }
    Ok(ClientReport { imm: o.imm, word })
}

/// Both sides in one process, twice: with a word and with a 0-byte message.
///
/// # Errors
/// If a side fails or the server received something else.
pub fn demo<T: Transport>(t: &T, env: &DemoEnv) -> Result<Vec<String>> {
    let mut v = Vec::new();
    for (imm, word) in [(1234u32, Some("hello")), (42, None)] {
        let (ts, tc) = (t.clone(), t.clone());
        let so = env.server();
        let mut co = env.client();
        co.imm = imm;
        co.words = word.map(String::from).into_iter().collect();
        let (s, c) =
            run_pair(move |ready| server(&ts, &ServerOpts { ready, ..so }), vec![Box::new(move || client(&tc, &co))])?;
        ensure!(s.imm == imm && s.expected == imm, "server got {s:?}");
        ensure!(s.value == word.unwrap_or(""), "server received {:?}", s.value);
        ensure!(word.is_some() || s.bytes == 0, "a 0-byte send arrived with {} bytes", s.bytes);
        v.extend([side("server", &s), side("client", &c[0])].concat());
    }
    Ok(v)
}
