//! 06-multiple-connections: each client exposes its name (`READ_SRC`, 32 bytes) in the connect
//! private data (`common_data`); the server keeps one 32-byte slot per client (up to 10) in one
//! `READ_DST` region, reads each client's name into its slot once the connection is
//! established, prints it and disconnects that client.
//!
//! With `shared = true` it is 06scch: the server's connections have a completion channel
//! (`rpma_conn_cfg_set_compl_channel`) and the server waits for the read's completion with
//! `rpma_conn_wait` on it (the clients are 06's).
//!
//! The C server multiplexes the connections' event and completion fds with epoll; this server
//! serves `--clients N` connections in arrival order (a client waits in the listen backlog
//! meanwhile), which exercises the same API calls and data flow.

use anyhow::{ensure, Result};
use rpma::{ConnCfg, Ep, MrRemote, Transport, Usage, WcOpcode};

use super::common::{
    accept, check_wc, client_peer, connect, cstr, disconnect_and_wait_close, next_wc_shared, server_peer,
    wait_close_and_disconnect, wait_wc,
};
use super::{run_pair, side, ClientFn, ClientOpts, DemoEnv, Report, ServerOpts};
use crate::pdata::CommonData;

/// `MAX_NAME_SIZE`.
pub const MAX_NAME_SIZE: usize = 32;
/// `CLIENT_MAX`.
pub const CLIENT_MAX: usize = 10;
/// Names a client picks from when none is given.
pub const NAMES: [&str; 8] = ["Alice", "Bob", "Carol", "Dave", "Eve", "Frank", "Grace", "Heidi"];

/// The server's report.
#[derive(Debug, Clone)]
pub struct ServerReport {
    /// The names read, by slot.
    pub names: Vec<String>,
}

impl Report for ServerReport {
    fn lines(&self) -> Vec<String> {
        self.names.iter().enumerate().map(|(i, n)| format!("slot {i}: read the name {n:?} and disconnected")).collect()
    }
}

/// The client's report.
#[derive(Debug, Clone)]
pub struct ClientReport {
    /// The name exposed.
    pub name: String,
}

impl Report for ClientReport {
    fn lines(&self) -> Vec<String> {
        vec![format!("exposed the name {:?}", self.name)]
    }
}

/// The server side (`--clients N`, 1 to 10); with `shared`, 06scch's (each connection's
/// completions waited for on its completion channel).
///
/// # Errors
/// If `clients` is out of range or any step fails.
pub fn server<T: Transport>(t: &T, o: &ServerOpts, shared: bool) -> Result<ServerReport> {
    ensure!((1..=CLIENT_MAX).contains(&o.clients), "--clients must be 1 to {CLIENT_MAX}");
    let peer = server_peer(t, &o.addr)?;
    let ep = Ep::listen(&peer, &o.addr, &o.port)?;
    o.ready.signal();
    let dst = peer.alloc_mr(MAX_NAME_SIZE * CLIENT_MAX, Usage::READ_DST)?;
    let cfg = shared.then(|| ConnCfg::new().with_shared_channel(true));
    let mut names = Vec::new();
    for slot in 0..o.clients {
        let conn = accept(&ep, &o.stop, cfg.as_ref(), None, |_| Ok(()))?;
        let cd = CommonData::decode(conn.private_data())?;
        let src = MrRemote::from_descriptor(&cd.mr_desc)?;
        let offset = slot * MAX_NAME_SIZE;
        conn.read(dst.slice(offset..offset + MAX_NAME_SIZE), src.at(0)).context(slot as u64).post()?;
        let wc = if shared {
            let (wc, _) = next_wc_shared(&conn)?;
            check_wc(&wc, WcOpcode::RdmaRead)?;
            wc
        } else {
            wait_wc(&conn.cq(), WcOpcode::RdmaRead)?
        };
        ensure!(wc.wr_id() == slot as u64, "completion of another read ({} != {slot})", wc.wr_id());
        names.push(cstr(&dst.to_vec(offset, MAX_NAME_SIZE)?));
        disconnect_and_wait_close(conn)?;
    }
    dst.dereg()?;
    ep.shutdown()?;
    Ok(ServerReport { names })
}

/// The client side (`--name`, else a name from [`NAMES`] picked by process id).
///
/// # Errors
/// If any step fails.
pub fn client<T: Transport>(t: &T, o: &ClientOpts) -> Result<ClientReport> {
    let name = o.name.clone().unwrap_or_else(|| NAMES[std::process::id() as usize % NAMES.len()].to_owned());
    let bytes = name.as_bytes();
    let bytes = &bytes[..bytes.len().min(MAX_NAME_SIZE - 1)];
    let peer = client_peer(t, &o.addr)?;
    let mr = peer.alloc_mr(MAX_NAME_SIZE, Usage::READ_SRC)?;
    mr.write(0, bytes)?;
    let pdata = CommonData::new(0, &mr.descriptor()).encode()?;
    let conn = connect(&peer, &o.addr, &o.port, None, Some(&pdata), o.retries, o.retry_delay)?;
    wait_close_and_disconnect(conn)?;
    mr.dereg()?;
    Ok(ClientReport { name: String::from_utf8_lossy(bytes).into_owned() })
}

/// Three clients and the server (06scch's with `shared`) in one process: the server must have
/// read every name.
///
/// # Errors
/// If a side fails or the names read differ from those exposed.
pub fn demo<T: Transport>(t: &T, env: &DemoEnv, shared: bool) -> Result<Vec<String>> {
    let ts = t.clone();
    let mut so = env.server();
    so.clients = 3;
    let clients: Vec<ClientFn<ClientReport>> = NAMES[..3]
        .iter()
        .map(|n| {
            let tc = t.clone();
            let mut co = env.client();
            co.name = Some((*n).to_owned());
            Box::new(move || client(&tc, &co)) as ClientFn<ClientReport>
        })
        .collect();
    let (s, c) = run_pair(move |ready| server(&ts, &ServerOpts { ready, ..so }, shared), clients)?;
    let mut read = s.names.clone();
    let mut exposed: Vec<String> = c.iter().map(|c| c.name.clone()).collect();
    read.sort();
    exposed.sort();
    ensure!(read == exposed, "server read {read:?}, clients exposed {exposed:?}");
    let mut v = side("server", &s);
    for (i, c) in c.iter().enumerate() {
        v.extend(side(&format!("client #{i}"), c));
    }
    Ok(v)
}
