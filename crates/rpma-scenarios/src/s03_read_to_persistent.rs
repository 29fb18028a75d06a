//! 03-read-to-persistent: the client exposes its `struct hello_t` (`READ_SRC`, from a file or
//! DRAM) in the connect private data (`data_offset` = where the string starts); the server reads
//! the 1 KiB string into its own memory (`READ_DST`, a file after the signature, or DRAM),
//! persists it, and disconnects; the client then translates its hello ("Hello world!" ⇄
//! "¡Hola Mundo!") and persists that, so the next run sends the other language.

use anyhow::{ensure, Result};
use rpma::{Ep, MrRemote, Transport, Usage, WcOpcode};

use super::common::{
    accept, client_peer, connect, disconnect_and_wait_close, init_hello, server_peer, translate,
    wait_close_and_disconnect, wait_wc, Mem, HELLO_STR_OFFSET, HELLO_STR_SIZE, HELLO_T_SIZE,
};
use super::{run_pair, side, ClientOpts, DemoEnv, Report, ServerOpts};
use crate::pdata::CommonData;

/// The server's report.
#[derive(Debug, Clone)]
pub struct ServerReport {
    /// The value its memory held before (empty if none).
    pub old: String,
    /// The value read from the client.
    pub new: String,
    /// Whether it was persisted to a file.
    pub persisted: bool,
}

impl Report for ServerReport {
    fn lines(&self) -> Vec<String> {
        let mut v = Vec::new();
        if !self.old.is_empty() {
            v.push(format!("old value {:?}", self.old));
        }
        let to = if self.persisted { ", persisted to its file" } else { " (DRAM)" };
        v.push(format!("read {HELLO_STR_SIZE} bytes from the client: {:?}{to}", self.new));
        v
    }
}

/// The client's report.
#[derive(Debug, Clone)]
pub struct ClientReport {
    /// The value exposed to the server.
    pub sent: String,
    /// The value after translation.
    pub translation: String,
}

impl Report for ClientReport {
    fn lines(&self) -> Vec<String> {
        vec![format!("exposed {:?} (READ_SRC); after the read, translated to {:?}", self.sent, self.translation)]
    }
}

/// The server side (`--file`: its memory).
///
/// # Errors
/// If any step fails.
pub fn server<T: Transport>(t: &T, o: &ServerOpts) -> Result<ServerReport> {
    let peer = server_peer(t, &o.addr)?;
    let ep = Ep::listen(&peer, &o.addr, &o.port)?;
    o.ready.signal();
    let mem = Mem::new(&peer, o.file_source(), HELLO_STR_SIZE, Usage::READ_DST, None)?;
    let conn = accept(&ep, &o.stop, None, None, |_| Ok(()))?;
    let cd = CommonData::decode(conn.private_data())?;
    let src = MrRemote::from_descriptor(&cd.mr_desc)?;
    let old = mem.string_at(mem.data_offset, HELLO_STR_SIZE)?;
    let dst = mem.mr.slice(mem.data_offset..mem.data_offset + HELLO_STR_SIZE);
    conn.read(dst, src.at(usize::from(cd.data_offset))).post()?;
    wait_wc(&conn.cq(), WcOpcode::RdmaRead)?;
    mem.persist(mem.data_offset, HELLO_STR_SIZE)?;
    let new = mem.string_at(mem.data_offset, HELLO_STR_SIZE)?;
    disconnect_and_wait_close(conn)?;
    let persisted = mem.is_pmem();
    mem.dereg()?;
    ep.shutdown()?;
    Ok(ServerReport { old, new, persisted })
}

/// The client side (`--file`: its hello structure).
///
/// # Errors
/// If any step fails.
pub fn client<T: Transport>(t: &T, o: &ClientOpts) -> Result<ClientReport> {
    let peer = client_peer(t, &o.addr)?;
    let mem = Mem::new(&peer, o.file_source(), HELLO_T_SIZE, Usage::READ_SRC, Some(&init_hello))?;
    let sent = mem.string_at(mem.data_offset + HELLO_STR_OFFSET, HELLO_STR_SIZE)?;
    let data_offset = u16::try_from(mem.data_offset + HELLO_STR_OFFSET)?;
    let pdata = CommonData::new(data_offset, &mem.mr.descriptor()).encode()?;
    let conn = connect(&peer, &o.addr, &o.port, None, Some(&pdata), o.retries, o.retry_delay)?;
    wait_close_and_disconnect(conn)?;
    let translation = translate(&mem.mr, mem.data_offset)?;
    mem.persist(mem.data_offset, HELLO_T_SIZE)?;
    mem.dereg()?;
    Ok(ClientReport { sent, translation })
}

/// Both sides in one process (the server's memory a file in `env.dir`, read back after the
/// run), checked against each other.
///
/// # Errors
/// If a side fails, the server got something else than the client exposed, or the file does
/// not hold it.
pub fn demo<T: Transport>(t: &T, env: &DemoEnv) -> Result<Vec<String>> {
    let (ts, tc) = (t.clone(), t.clone());
    let path = env.dir.join("03-server.pmem");
    let mut so = env.server();
    so.file = Some(path.clone());
    let co = env.client();
    let (s, c) =
        run_pair(move |ready| server(&ts, &ServerOpts { ready, ..so }), vec![Box::new(move || client(&tc, &co))])?;
    ensure!(s.new == c[0].sent, "server read {:?}, client exposed {:?}", s.new, c[0].sent);
    ensure!(c[0].translation != c[0].sent, "client did not translate");
    let file = std::fs::read(&path)?;
    let at = super::common::SIGNATURE.len();
    ensure!(file.get(at..at + s.new.len()) == Some(s.new.as_bytes()), "the file does not hold {:?}", s.new);
    let mut v = [side("server", &s), side("client", &c[0])].concat();
    v.push(format!("file {}: holds {:?} after the signature", path.display(), s.new));
    Ok(v)
}
