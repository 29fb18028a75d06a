//! 05-flush-to-persistent: the server exposes 1 KiB (`WRITE_DST` plus
//! `FLUSH_TYPE_PERSISTENT | FLUSH_TYPE_VISIBILITY` for a file, `FLUSH_TYPE_VISIBILITY` for DRAM)
//! and sends the MR descriptor followed by its peer-configuration descriptor
//! (`--direct-pmem-write`); the client applies the peer configuration, writes its hello string
//! and flushes it: `PERSISTENT` if the server declared direct write to PMem, else `VISIBILITY`,
//! waiting for the flush completion (`FLUSH_ID`).
//!
//! With a file, a persistent flush makes the bytes durable in the file before it completes (the
//! mock writes the flushed range back at once; on verbs the file is the registered memory): the
//! server reads the file after the client disconnected and before deregistering, and reports
//! what it holds.

use std::path::Path;

use anyhow::{ensure, Context, Result};
use rpma::generic::Ep;
use rpma::{CompletionFlags, FlushType, PeerCfg, Transport, Usage};

use super::common::{
    accept, client_peer, connect, cstr, disconnect_and_wait_close, hello_target, init_hello, server_peer, translate,
    wait_close_and_disconnect, wait_flush, Mem, FLUSH_ID, HELLO_STR_OFFSET, HELLO_STR_SIZE, HELLO_T_SIZE,
};
use super::{run_pair, side, ClientOpts, DemoEnv, Report, ServerOpts};
use crate::pdata::CommonData;

/// The server's report.
#[derive(Debug, Clone)]
pub struct ServerReport {
    /// The value before the client wrote (empty if none).
    pub old: String,
    /// The value after the client disconnected.
    pub new: String,
    /// What the file held at that moment, before deregistration (with a file).
    pub in_file: Option<String>,
    /// Whether direct write to PMem was declared.
    pub direct_write_to_pmem: bool,
}

impl Report for ServerReport {
    fn lines(&self) -> Vec<String> {
        let mut v = Vec::new();
        if !self.old.is_empty() {
            v.push(format!("old value {:?}", self.old));
        }
        v.push(format!("declared direct write to PMem: {}; new value {:?}", self.direct_write_to_pmem, self.new));
        if let Some(f) = &self.in_file {
            v.push(format!("the file held {f:?} before deregistration"));
        }
        v
    }
}

/// The client's report.
#[derive(Debug, Clone)]
pub struct ClientReport {
    /// The value written.
    pub written: String,
    /// The flush type used.
    pub flush_type: FlushType,
    /// Its own hello after translation.
    pub translation: String,
}

impl Report for ClientReport {
    fn lines(&self) -> Vec<String> {
        vec![
            format!("wrote {:?} and flushed {HELLO_STR_SIZE} bytes ({:?})", self.written, self.flush_type),
            format!("translated its hello to {:?}", self.translation),
        ]
    }
}

fn file_string(path: &Path, offset: usize) -> Result<String> {
    let b = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(cstr(b.get(offset..).unwrap_or_default()))
}

/// The server side (`--file`: its memory; `--direct-pmem-write`: the peer configuration).
///
/// # Errors
/// If any step fails.
pub fn server<T: Transport>(t: &T, o: &ServerOpts) -> Result<ServerReport> {
    let pcfg = PeerCfg::new();
    pcfg.set_direct_write_to_pmem(o.direct_write_to_pmem);
    let peer = server_peer(t, &o.addr)?;
    let flush = if o.file.is_some() {
        Usage::FLUSH_TYPE_PERSISTENT | Usage::FLUSH_TYPE_VISIBILITY
    } else {
        Usage::FLUSH_TYPE_VISIBILITY
    };
    let mem = Mem::new(&peer, o.file.as_deref(), HELLO_STR_SIZE, Usage::WRITE_DST | flush, None)?;
    let old = mem.string_at(mem.data_offset, HELLO_STR_SIZE)?;
    let ep = Ep::listen(&peer, &o.addr, &o.port)?;
    o.ready.signal();
    let pdata = CommonData::new(u16::try_from(mem.data_offset)?, &mem.mr.descriptor()).with_pcfg(&pcfg).encode()?;
    let conn = accept(&ep, &o.stop, None, Some(&pdata), |_| Ok(()))?;
    wait_close_and_disconnect(conn)?;
    let new = mem.string_at(mem.data_offset, HELLO_STR_SIZE)?;
    let in_file = mem.file.as_deref().map(|p| file_string(p, mem.data_offset)).transpose()?;
    mem.mr.dereg()?;
    ep.shutdown()?;
    Ok(ServerReport { old, new, in_file, direct_write_to_pmem: o.direct_write_to_pmem })
}

/// The client side (`--file`: its hello structure).
///
/// # Errors
/// If any step fails or the remote region is too small.
pub fn client<T: Transport>(t: &T, o: &ClientOpts) -> Result<ClientReport> {
    let peer = client_peer(t, &o.addr)?;
    let mem = Mem::new(&peer, o.file.as_deref(), HELLO_T_SIZE, Usage::WRITE_SRC, Some(&init_hello))?;
    let written = mem.string_at(mem.data_offset + HELLO_STR_OFFSET, HELLO_STR_SIZE)?;
    let conn = connect(&peer, &o.addr, &o.port, None, None, o.retries, o.retry_delay)?;
    let cd = CommonData::decode(conn.private_data())?;
    let pcfg_desc = cd.pcfg_desc.as_deref().context("the server sent no peer configuration")?;
    let pcfg = PeerCfg::from_descriptor(pcfg_desc)?;
    conn.apply_remote_peer_cfg(&pcfg);
    let (dst, offset) = hello_target(&cd)?;
    let src_off = mem.data_offset + HELLO_STR_OFFSET;
    conn.write(Some(&dst), offset, Some(&mem.mr), src_off, HELLO_STR_SIZE, CompletionFlags::ON_ERROR, 0)?;
    let flush_type = if pcfg.direct_write_to_pmem() { FlushType::Persistent } else { FlushType::Visibility };
    conn.flush(&dst, offset, HELLO_STR_SIZE, flush_type, CompletionFlags::ALWAYS, FLUSH_ID)?;
    let wc = wait_flush(&conn.cq())?;
    ensure!(wc.wr_id == FLUSH_ID, "unexpected wc.wr_id value ({:#x} != {FLUSH_ID:#x})", wc.wr_id);
    let translation = translate(&mem.mr, mem.data_offset)?;
    mem.persist(mem.data_offset, HELLO_T_SIZE)?;
    disconnect_and_wait_close(conn)?;
    mem.mr.dereg()?;
    Ok(ClientReport { written, flush_type, translation })
}

/// Both sides in one process (the server's memory a file in `env.dir`, direct write to PMem
/// declared), checked against each other: the written value must be in the file before the
/// server deregisters its memory, i.e. made durable by the persistent flush.
///
/// # Errors
/// If a side fails or the file does not hold the flushed value.
pub fn demo<T: Transport>(t: &T, env: &DemoEnv) -> Result<Vec<String>> {
    let (ts, tc) = (t.clone(), t.clone());
    let mut so = env.server();
    so.file = Some(env.dir.join("05-server.pmem"));
    so.direct_write_to_pmem = true;
    let co = env.client();
    let (s, c) =
        run_pair(move |ready| server(&ts, &ServerOpts { ready, ..so }), vec![Box::new(move || client(&tc, &co))])?;
    ensure!(c[0].flush_type == FlushType::Persistent, "client flushed {:?}", c[0].flush_type);
    ensure!(s.new == c[0].written, "server holds {:?}, client wrote {:?}", s.new, c[0].written);
    ensure!(s.in_file.as_deref() == Some(c[0].written.as_str()), "the file held {:?} before deregistration", s.in_file);
    Ok([side("server", &s), side("client", &c[0])].concat())
}
