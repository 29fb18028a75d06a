//! 01-connection: the client connects with the private data `"Hello server!"`, the server
//! accepts with `"Hello client!"` (both NUL-terminated C strings); each reports what it got, then
//! the server disconnects and the client, seeing the connection closed, disconnects too. The
//! client retries a rejected (or not yet listened-to) request up to `retries` times.

use anyhow::{ensure, Result};
use rpma::{Ep, Transport};

use super::common::{
    accept, client_peer, connect, cstr, disconnect_and_wait_close, server_peer, wait_close_and_disconnect,
};
use super::{run_pair, side, ClientOpts, DemoEnv, Report, ServerOpts};

/// What the client sends.
pub const CLIENT_HELLO: &[u8] = b"Hello server!\0";
/// What the server answers.
pub const SERVER_HELLO: &[u8] = b"Hello client!\0";

/// The server's report.
#[derive(Debug, Clone)]
pub struct ServerReport {
    /// The private data received with the request (as a C string).
    pub received: String,
}

impl Report for ServerReport {
    fn lines(&self) -> Vec<String> {
        vec![format!("received private data {:?}, accepted with {:?}", self.received, cstr(SERVER_HELLO))]
    }
}

/// The client's report.
#[derive(Debug, Clone)]
pub struct ClientReport {
    /// The private data the server accepted with (as a C string).
    pub received: String,
}

impl Report for ClientReport {
    fn lines(&self) -> Vec<String> {
        vec![format!("connected with {:?}, received {:?}", cstr(CLIENT_HELLO), self.received)]
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
    let mut received = String::new();
    let conn = accept(&ep, &o.stop, None, Some(SERVER_HELLO), |req| {
        received = cstr(req.private_data());
        Ok(())
    })?;
    disconnect_and_wait_close(conn)?;
    ep.shutdown()?;
    Ok(ServerReport { received })
}

/// The client side.
///
/// # Errors
/// If any step fails.
pub fn client<T: Transport>(t: &T, o: &ClientOpts) -> Result<ClientReport> {
    let peer = client_peer(t, &o.addr)?;
    let conn = connect(&peer, &o.addr, &o.port, None, Some(CLIENT_HELLO), o.retries, o.retry_delay)?;
    let received = cstr(conn.private_data());
    wait_close_and_disconnect(conn)?;
    Ok(ClientReport { received })
}

/// Both sides in one process, checked against each other.
///
/// # Errors
/// If a side fails or the private data did not arrive intact.
pub fn demo<T: Transport>(t: &T, env: &DemoEnv) -> Result<Vec<String>> {
    let (ts, tc) = (t.clone(), t.clone());
    let (so, co) = (env.server(), env.client());
    let (s, c) =
        run_pair(move |ready| server(&ts, &ServerOpts { ready, ..so }), vec![Box::new(move || client(&tc, &co))])?;
    ensure!(s.received == cstr(CLIENT_HELLO), "server received {:?}", s.received);
    ensure!(c[0].received == cstr(SERVER_HELLO), "client received {:?}", c[0].received);
    Ok([side("server", &s), side("client", &c[0])].concat())
}
