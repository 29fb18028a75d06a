//! 11-write-with-imm: the server exposes 1 KiB (`WRITE_DST`, `data_offset = 0`) and pre-posts
//! a 1-byte receive on the request; the client writes 1 KiB whose first 4 bytes are its
//! immediate value, with that immediate data; the server's receive completes as
//! `RECV_RDMA_WITH_IMM` and it checks that the immediate data equals the written value.

use anyhow::{ensure, Context, Result};
use rpma::{Ep, MrRemote, Transport, Usage, WcOpcode};

use super::common::{
    accept, client_peer, connect, disconnect_and_wait_close, server_peer, wait_close_and_disconnect, wait_wc, KILOBYTE,
};
use super::{run_pair, side, ClientOpts, DemoEnv, Report, ServerOpts};
use crate::pdata::CommonData;

/// The server's report.
#[derive(Debug, Clone)]
pub struct ServerReport {
    /// The value found at the start of its region.
    pub value: u32,
    /// The immediate data received.
    pub imm: u32,
}

impl Report for ServerReport {
    fn lines(&self) -> Vec<String> {
        vec![format!("the value {} was written together with immediate data {}", self.value, self.imm)]
    }
}

/// The client's report.
#[derive(Debug, Clone)]
pub struct ClientReport {
    /// The value and immediate data written.
    pub imm: u32,
}

impl Report for ClientReport {
    fn lines(&self) -> Vec<String> {
        vec![format!("wrote value {} ({KILOBYTE} bytes) with immediate data {}", self.imm, self.imm)]
    }
}

/// The server side.
///
/// # Errors
/// If any step fails or the immediate data differs from the written value.
pub fn server<T: Transport>(t: &T, o: &ServerOpts) -> Result<ServerReport> {
    let peer = server_peer(t, &o.addr)?;
    let dst = peer.alloc_mr(KILOBYTE, Usage::WRITE_DST)?;
    let recv = peer.alloc_mr(1, Usage::RECV)?;
    let pdata = CommonData::new(0, &dst.descriptor()).encode()?;
    let ep = Ep::listen(&peer, &o.addr, &o.port)?;
    o.ready.signal();
    let conn = accept(&ep, &o.stop, None, Some(&pdata), |req| Ok(req.recv(recv.slice(..1)).post()?))?;
    let wc = wait_wc(&conn.cq(), WcOpcode::RecvRdmaWithImm)?;
    let imm = wc.imm_data().context("received no immediate data")?;
    let mut b = [0u8; 4];
    dst.read(0, &mut b)?;
    let value = u32::from_ne_bytes(b);
    ensure!(imm == value, "immediate data {imm} != written value {value}");
    wait_close_and_disconnect(conn)?;
    dst.dereg()?;
    recv.dereg()?;
    ep.shutdown()?;
    Ok(ServerReport { value, imm })
}

/// The client side (`--imm N`).
///
/// # Errors
/// If any step fails.
pub fn client<T: Transport>(t: &T, o: &ClientOpts) -> Result<ClientReport> {
    let peer = client_peer(t, &o.addr)?;
    let src = peer.alloc_mr(KILOBYTE, Usage::WRITE_SRC)?;
    let conn = connect(&peer, &o.addr, &o.port, None, None, o.retries, o.retry_delay)?;
    let cd = CommonData::decode(conn.private_data())?;
    let dst = MrRemote::from_descriptor(&cd.mr_desc)?;
    src.write(0, &o.imm.to_ne_bytes())?;
    let at = usize::from(cd.data_offset);
    conn.write(dst.at(at), src.slice(..KILOBYTE)).imm(o.imm).post()?;
    wait_wc(&conn.cq(), WcOpcode::RdmaWrite)?;
    disconnect_and_wait_close(conn)?;
    src.dereg()?;
    Ok(ClientReport { imm: o.imm })
}

/// Both sides in one process.
///
/// # Errors
/// If a side fails or the server saw another value.
pub fn demo<T: Transport>(t: &T, env: &DemoEnv) -> Result<Vec<String>> {
    let (ts, tc) = (t.clone(), t.clone());
    let so = env.server();
    let mut co = env.client();
    co.imm = 0xC0FFEE;
    let (s, c) =
        run_pair(move |ready| server(&ts, &ServerOpts { ready, ..so }), vec![Box::new(move || client(&tc, &co))])?;
    ensure!(s.value == 0xC0FFEE && s.imm == 0xC0FFEE, "server saw {s:?}");
    Ok([side("server", &s), side("client", &c[0])].concat())
}
