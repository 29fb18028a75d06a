//! 04-write-to-persistent: the server exposes 1 KiB (`WRITE_DST | READ_SRC`, a file after the
//! signature, or DRAM) with `data_offset`; the client writes its hello string there and makes it
//! durable by hand: an 8-byte RDMA Read at offset 0 after the write (read-after-write), then
//! translates its own hello. The server prints the value when the client has disconnected.

use anyhow::{ensure, Result};
use rpma::{CompletionFlags, Ep, Transport, Usage, WcOpcode};

use super::common::{
    accept, client_peer, connect, disconnect_and_wait_close, hello_target, init_hello, server_peer, translate,
    wait_close_and_disconnect, wait_wc, Mem, HELLO_STR_OFFSET, HELLO_STR_SIZE, HELLO_T_SIZE,
};
use super::promise::Promise;
use super::{run_pair, side, ClientOpts, DemoEnv, Report, ServerOpts};
use crate::pdata::CommonData;

/// `RAW_BUFFER_SIZE`: the read-after-write buffer.
pub const RAW_BUFFER_SIZE: usize = 8;

/// The server's report.
#[derive(Debug, Clone)]
pub struct ServerReport {
    /// The value before the client wrote (empty if none).
    pub old: String,
    /// The value after the client disconnected.
    pub new: String,
    /// Whether the memory is a file.
    pub pmem: bool,
}

impl Report for ServerReport {
    fn lines(&self) -> Vec<String> {
        let mut v = Vec::new();
        if !self.old.is_empty() {
            v.push(format!("old value {:?}", self.old));
        }
        let mem = if self.pmem { "file" } else { "DRAM" };
        v.push(format!("new value {:?} ({mem})", self.new));
        v
    }
}

/// The client's report.
#[derive(Debug, Clone)]
pub struct ClientReport {
    /// The value written.
    pub written: String,
    /// The remote offset written at.
    pub offset: usize,
    /// The 8 bytes read back after the write.
    pub raw: [u8; RAW_BUFFER_SIZE],
    /// Its own hello after translation.
    pub translation: String,
}

impl Report for ClientReport {
    fn lines(&self) -> Vec<String> {
        vec![
            format!("wrote {HELLO_STR_SIZE} bytes at remote offset {}: {:?}", self.offset, self.written),
            format!("read-after-write of {RAW_BUFFER_SIZE} bytes at offset 0: {:02x?}", self.raw),
            format!("translated its hello to {:?}", self.translation),
        ]
    }
}

/// The server side (`--file`: its memory).
///
/// # Errors
/// If any step fails.
pub fn server<T: Transport>(t: &T, o: &ServerOpts) -> Result<ServerReport> {
    let peer = server_peer(t, &o.addr)?;
    let mem = Mem::new(&peer, o.file_source(), HELLO_STR_SIZE, Usage::WRITE_DST | Usage::READ_SRC, None)?;
    let old = mem.string_at(mem.data_offset, HELLO_STR_SIZE)?;
    let ep = Ep::listen(&peer, &o.addr, &o.port)?;
    o.ready.signal();
    let pdata = CommonData::new(u16::try_from(mem.data_offset)?, &mem.mr.descriptor()).encode()?;
    let conn = accept(&ep, &o.stop, None, Some(&pdata), |_| Ok(()))?;
    wait_close_and_disconnect(conn)?;
    let new = mem.string_at(mem.data_offset, HELLO_STR_SIZE)?;
    let pmem = mem.is_pmem();
    mem.dereg()?;
    ep.shutdown()?;
    Ok(ServerReport { old, new, pmem })
}

/// The client side (`--file`: its hello structure).
///
/// # Errors
/// If any step fails or the remote region is too small.
pub fn client<T: Transport>(t: &T, o: &ClientOpts) -> Result<ClientReport> {
    let peer = client_peer(t, &o.addr)?;
    let mem = Mem::new(&peer, o.file_source(), HELLO_T_SIZE, Usage::WRITE_SRC, Some(&init_hello))?;
    let written = mem.string_at(mem.data_offset + HELLO_STR_OFFSET, HELLO_STR_SIZE)?;
    let conn = connect(&peer, &o.addr, &o.port, None, None, o.retries, o.retry_delay)?;
    let raw_mr = peer.alloc_mr(RAW_BUFFER_SIZE, Usage::READ_DST)?;
    let cd = CommonData::decode(conn.private_data())?;
    let (dst, offset) = hello_target(&cd)?;
    let src_off = mem.data_offset + HELLO_STR_OFFSET;
    conn.write(dst.at(offset), mem.mr.slice(src_off..src_off + HELLO_STR_SIZE))
        .flags(CompletionFlags::ON_ERROR)
        .post()?;
    conn.read(raw_mr.slice(..RAW_BUFFER_SIZE), dst.at(0)).post()?;
    wait_wc(&conn.cq(), WcOpcode::RdmaRead)?;
    // The read after the write: the hello is durable at a server with direct write to PMem.
    o.promise(Promise::Bytes { offset, bytes: mem.mr.to_vec(src_off, HELLO_STR_SIZE)? });
    let mut raw = [0u8; RAW_BUFFER_SIZE];
    raw_mr.read(0, &mut raw)?;
    let translation = translate(&mem.mr, mem.data_offset)?;
    mem.persist(mem.data_offset, HELLO_T_SIZE)?;
    disconnect_and_wait_close(conn)?;
    mem.dereg()?;
    Ok(ClientReport { written, offset, raw, translation })
}

/// Both sides in one process (the server's memory a file in `env.dir`), checked against each
/// other.
///
/// # Errors
/// If a side fails or the server holds something else than the client wrote.
pub fn demo<T: Transport>(t: &T, env: &DemoEnv) -> Result<Vec<String>> {
    let (ts, tc) = (t.clone(), t.clone());
    let path = env.dir.join("04-server.pmem");
    let mut so = env.server();
    so.file = Some(path.clone());
    let co = env.client();
    let (s, c) =
        run_pair(move |ready| server(&ts, &ServerOpts { ready, ..so }), vec![Box::new(move || client(&tc, &co))])?;
    ensure!(s.new == c[0].written, "server holds {:?}, client wrote {:?}", s.new, c[0].written);
    let file = std::fs::read(&path)?;
    ensure!(file.starts_with(super::common::SIGNATURE), "the file has no signature");
    ensure!(c[0].raw[..] == file[..RAW_BUFFER_SIZE], "read-after-write returned {:02x?}", c[0].raw);
    let at = c[0].offset;
    ensure!(file.get(at..at + s.new.len()) == Some(s.new.as_bytes()), "the file does not hold {:?}", s.new);
    let mut v = [side("server", &s), side("client", &c[0])].concat();
    v.push(format!("file {}: holds {:?} at offset {at}", path.display(), s.new));
    Ok(v)
}
