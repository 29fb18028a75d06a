//! 05-flush-to-persistent: the server exposes 1 KiB (`WRITE_DST` plus
//! `FLUSH_TYPE_PERSISTENT | FLUSH_TYPE_VISIBILITY` for a file, `FLUSH_TYPE_VISIBILITY` for DRAM)
//! and sends the MR descriptor followed by its peer-configuration descriptor
//! (`--direct-pmem-write`); the client applies the peer configuration, writes its hello string
//! and flushes it: `PERSISTENT` if the server declared direct write to PMem, else `VISIBILITY`,
//! waiting for the flush completion (`FLUSH_ID`).
//!
//! The server reads its file after the client disconnected, before deregistering, and again
//! after. With a mapped file (the registered memory is the file: `ServerOpts::map_file`) the
//! flushed bytes are in the file before deregistration (a persistent flush syncs them there on
//! the mock). The `rpma` command cannot map a file without unsafe code, so its server's memory
//! is a copy of the file, written back when it deregisters: the file has the bytes only after.

use std::path::Path;

use anyhow::{ensure, Context, Result};
use rpma::{CompletionFlags, Ep, FlushType, PeerCfg, Transport, Usage};

use super::common::{
    accept, client_peer, connect, disconnect_and_wait_close, hello_target, init_hello, server_peer, translate,
    wait_close_and_disconnect, wait_flush, Mem, FLUSH_ID, HELLO_STR_OFFSET, HELLO_STR_SIZE, HELLO_T_SIZE,
};
use super::promise::Promise;
use super::{run_pair, side, ClientOpts, DemoEnv, Report, ServerOpts};
use crate::native::{OpUse, OpWatch};
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
    /// What the file held after deregistration (with a file).
    pub file_after: Option<String>,
    /// Whether the file was mapped (else its memory was a copy, written back at deregistration).
    pub mapped: bool,
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
        if let (Some(before), Some(after)) = (&self.in_file, &self.file_after) {
            let how = if self.mapped { "mapped" } else { "a copy, written back at deregistration" };
            v.push(format!("the file ({how}) held {before:?} before deregistration, {after:?} after"));
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
    /// Whether the flush was native or emulated.
    pub ops: OpUse,
    /// Its own hello after translation.
    pub translation: String,
}

impl Report for ClientReport {
    fn lines(&self) -> Vec<String> {
        vec![
            format!("wrote {:?} and flushed {HELLO_STR_SIZE} bytes ({:?})", self.written, self.flush_type),
            format!("path: {}", self.ops.describe()),
            format!("translated its hello to {:?}", self.translation),
        ]
    }
}

/// The server side (`--file`: its memory; `--direct-pmem-write`: the peer configuration).
///
/// # Errors
/// If any step fails.
pub fn server<T: Transport>(t: &T, o: &ServerOpts) -> Result<ServerReport> {
    let pcfg = PeerCfg::new().with_direct_write_to_pmem(o.direct_write_to_pmem);
    let peer = server_peer(t, &o.addr)?;
    let flush = if o.file.is_some() {
        Usage::FLUSH_TYPE_PERSISTENT | Usage::FLUSH_TYPE_VISIBILITY
    } else {
        Usage::FLUSH_TYPE_VISIBILITY
    };
    let mem = Mem::new(&peer, o.file_source(), HELLO_STR_SIZE, Usage::WRITE_DST | flush, None)?;
    let old = mem.string_at(mem.data_offset, HELLO_STR_SIZE)?;
    let ep = Ep::listen(&peer, &o.addr, &o.port)?;
    o.ready.signal();
    let pdata = CommonData::new(u16::try_from(mem.data_offset)?, &mem.mr.descriptor()).with_pcfg(&pcfg).encode()?;
    let conn = accept(&ep, &o.stop, None, Some(&pdata), |_| Ok(()))?;
    wait_close_and_disconnect(conn)?;
    let new = mem.string_at(mem.data_offset, HELLO_STR_SIZE)?;
    let (path, at, mapped) = (mem.path().map(Path::to_path_buf), mem.data_offset, mem.is_mapped());
    let in_file = path.as_deref().map(|p| super::common::file_string(p, o.file_offset, at, o.map_file)).transpose()?;
    mem.dereg()?;
    let file_after =
        path.as_deref().map(|p| super::common::file_string(p, o.file_offset, at, o.map_file)).transpose()?;
    ep.shutdown()?;
    Ok(ServerReport { old, new, in_file, file_after, mapped, direct_write_to_pmem: o.direct_write_to_pmem })
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
    let cd = CommonData::decode(conn.private_data())?;
    let pcfg_desc = cd.pcfg_desc.as_deref().context("the server sent no peer configuration")?;
    let pcfg = PeerCfg::from_descriptor(pcfg_desc)?;
    conn.apply_remote_peer_cfg(&pcfg);
    let (dst, offset) = hello_target(&cd)?;
    let src_off = mem.data_offset + HELLO_STR_OFFSET;
    let watch = OpWatch::start::<T>(peer.capabilities());
    conn.write(dst.at(offset), mem.mr.slice(src_off..src_off + HELLO_STR_SIZE))
        .flags(CompletionFlags::ON_ERROR)
        .post()?;
    let flush_type = if pcfg.direct_write_to_pmem() { FlushType::Persistent } else { FlushType::Visibility };
    conn.flush(dst.slice(offset..offset + HELLO_STR_SIZE), flush_type).context(FLUSH_ID).post()?;
    let wc = wait_flush(&conn.cq())?;
    ensure!(wc.wr_id() == FLUSH_ID, "unexpected wc.wr_id value ({:#x} != {FLUSH_ID:#x})", wc.wr_id());
    if flush_type == FlushType::Persistent {
        o.promise(Promise::Bytes { offset, bytes: mem.mr.to_vec(src_off, HELLO_STR_SIZE)? });
    }
    let ops = watch.finish::<T>(1, 0);
    let translation = translate(&mem.mr, mem.data_offset)?;
    mem.persist(mem.data_offset, HELLO_T_SIZE)?;
    disconnect_and_wait_close(conn)?;
    mem.dereg()?;
    Ok(ClientReport { written, flush_type, ops, translation })
}

/// Both sides in one process (the server's memory a file in `env.dir`, direct write to PMem
/// declared), checked against each other: the client flushed `PERSISTENT`, the server holds the
/// value, and so does its file: before deregistration if the file was mapped (`env` cannot ask
/// for that: the `rpma` command has no safe way to map a file), after it otherwise.
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
    ensure!(c[0].ops.counts.flush().is_some(), "no flush counted: {:?}", c[0].ops);
    ensure!(s.new == c[0].written, "server holds {:?}, client wrote {:?}", s.new, c[0].written);
    let want = Some(c[0].written.as_str());
    ensure!(s.file_after.as_deref() == want, "the file held {:?} after deregistration", s.file_after);
    ensure!(!s.mapped || s.in_file.as_deref() == want, "the mapped file held {:?} before deregistration", s.in_file);
    Ok([side("server", &s), side("client", &c[0])].concat())
}
