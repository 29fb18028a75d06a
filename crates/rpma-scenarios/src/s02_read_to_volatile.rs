//! 02-read-to-volatile: the server registers `"Hello client!"` (`READ_SRC`) and sends its
//! descriptor in the accept private data (`common_data`, `data_offset = 0`); the client reads the
//! whole region into a 1 KiB DRAM buffer (`READ_DST`) and waits for the RDMA Read completion.

use anyhow::{ensure, Result};
use rpma::{Ep, MrRemote, Transport, Usage, WcOpcode};

use super::common::{
    accept, client_peer, connect, cstr, disconnect_and_wait_close, server_peer, wait_close_and_disconnect, wait_wc,
    KILOBYTE,
};
use super::{run_pair, side, ClientOpts, DemoEnv, Report, ServerOpts};
use crate::pdata::CommonData;

/// The string the server exposes (`HELLO_STR`).
pub const HELLO_STR: &str = "Hello client!";

/// The server's report.
#[derive(Debug, Clone)]
pub struct ServerReport {
    /// Bytes exposed for reading.
    pub exposed: usize,
}

impl Report for ServerReport {
    fn lines(&self) -> Vec<String> {
        vec![format!("exposed {HELLO_STR:?} ({} bytes, READ_SRC) in the accept private data", self.exposed)]
    }
}

/// The client's report.
#[derive(Debug, Clone)]
pub struct ClientReport {
    /// What was read.
    pub read: String,
    /// Bytes read.
    pub bytes: usize,
}

impl Report for ClientReport {
    fn lines(&self) -> Vec<String> {
        vec![format!("read {} bytes: {:?}", self.bytes, self.read)]
    }
}

/// The server side.
///
/// # Errors
/// If any step fails.
pub fn server<T: Transport>(t: &T, o: &ServerOpts) -> Result<ServerReport> {
    let peer = server_peer(t, &o.addr)?;
    let ep = Ep::listen(&peer, &o.addr, &o.port)?;
    o.ready.signal();
    let size = HELLO_STR.len() + 1;
    let mr = peer.alloc_mr(size, Usage::READ_SRC)?;
    mr.write(0, HELLO_STR.as_bytes())?;
    let pdata = CommonData::new(0, &mr.descriptor()).encode()?;
    let conn = accept(&ep, &o.stop, None, Some(&pdata), |_| Ok(()))?;
    wait_close_and_disconnect(conn)?;
    mr.dereg()?;
    ep.shutdown()?;
    Ok(ServerReport { exposed: size })
}

/// The client side.
///
/// # Errors
/// If any step fails or the server's region is larger than 1 KiB.
pub fn client<T: Transport>(t: &T, o: &ClientOpts) -> Result<ClientReport> {
    let peer = client_peer(t, &o.addr)?;
    let conn = connect(&peer, &o.addr, &o.port, None, None, o.retries, o.retry_delay)?;
    let dst = peer.alloc_mr(KILOBYTE, Usage::READ_DST)?;
    let cd = CommonData::decode(conn.private_data())?;
    let src = MrRemote::from_descriptor(&cd.mr_desc)?;
    let len = usize::try_from(src.len())?;
    ensure!(len <= KILOBYTE, "the remote region is too big ({len} > {KILOBYTE})");
    conn.read(dst.slice(0..len), src.at(0)).post()?;
    wait_wc(&conn.cq(), WcOpcode::RdmaRead)?;
    let read = cstr(&dst.to_vec(0, len)?);
    disconnect_and_wait_close(conn)?;
    Ok(ClientReport { read, bytes: len })
}

/// Both sides in one process, checked against each other.
///
/// # Errors
/// If a side fails or the client read something else.
pub fn demo<T: Transport>(t: &T, env: &DemoEnv) -> Result<Vec<String>> {
    let (ts, tc) = (t.clone(), t.clone());
    let (so, co) = (env.server(), env.client());
    let (s, c) =
        run_pair(move |ready| server(&ts, &ServerOpts { ready, ..so }), vec![Box::new(move || client(&tc, &co))])?;
    ensure!(c[0].read == HELLO_STR, "client read {:?}", c[0].read);
    ensure!(c[0].bytes == s.exposed, "client read {} bytes of {}", c[0].bytes, s.exposed);
    Ok([side("server", &s), side("client", &c[0])].concat())
}
