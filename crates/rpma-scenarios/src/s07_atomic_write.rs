//! 07-atomic-write: the server holds a log `struct log { char signature[8]; uint64_t used;
//! char data[1024]; }` (a file signed `"LOG"`, or DRAM) with `used` starting at
//! `offsetof(data)`, and sends its descriptor with `data_offset = offsetof(used)`. The client
//! reads `used`, then appends each word: write the word at `used` → flush it → atomic write of
//! the new `used` → flush that, waiting only for the last flush (`FLUSH_ID`). The client
//! unilaterally assumes the server supports persistent flush (it applies a local peer
//! configuration with direct write to PMem) and flushes `PERSISTENT` if the region was
//! registered for it (a file), else `VISIBILITY`.
//!
//! Deviation: the C client flushes 8 bytes after each word; this one flushes the whole word, so
//! a persistent flush really covers what was written.

use anyhow::{ensure, Context, Result};
use rpma::{CompletionFlags, Ep, FlushType, MrLocal, MrRemote, PeerCfg, Transport, Usage, WcOpcode};

use super::common::{
    accept, client_peer, connect, disconnect_and_wait_close, server_peer, wait_close_and_disconnect, wait_flush,
    wait_wc, Mem, FLUSH_ID, KILOBYTE,
};
use super::promise::Promise;
use super::{run_pair, side, ClientOpts, DemoEnv, Report, ServerOpts};
use crate::native::{OpUse, OpWatch};
use crate::pdata::CommonData;

/// `LOG_SIGNATURE_SIZE`.
pub const LOG_SIGNATURE_SIZE: usize = 8;
/// `offsetof(struct log, used)`.
pub const USED_OFFSET: usize = LOG_SIGNATURE_SIZE;
/// `offsetof(struct log, data)`.
pub const DATA_OFFSET: usize = USED_OFFSET + 8;
/// `sizeof(struct log)`.
pub const LOG_SIZE: usize = DATA_OFFSET + KILOBYTE;
/// The signature of an initialized log (`"LOG"`, NUL-padded to 8 bytes).
pub const LOG_SIGNATURE: [u8; LOG_SIGNATURE_SIZE] = *b"LOG\0\0\0\0\0";

/// The server's report.
#[derive(Debug, Clone)]
pub struct ServerReport {
    /// The words in the log after the client disconnected.
    pub words: Vec<String>,
    /// The final `used`.
    pub used: u64,
    /// Whether the log is a file.
    pub pmem: bool,
}

impl Report for ServerReport {
    fn lines(&self) -> Vec<String> {
        let mem = if self.pmem { "file" } else { "DRAM" };
        vec![format!("log ({mem}) holds {:?}, used = {}", self.words, self.used)]
    }
}

/// The client's report.
#[derive(Debug, Clone)]
pub struct ClientReport {
    /// `used` read at the start.
    pub used_before: u64,
    /// The words appended.
    pub words: Vec<String>,
    /// `used` after the last word.
    pub used_after: u64,
    /// The flush type used.
    pub flush_type: FlushType,
    /// Whether the flushes and atomic writes were native or emulated.
    pub ops: OpUse,
}

impl Report for ClientReport {
    fn lines(&self) -> Vec<String> {
        vec![
            format!("read used = {}", self.used_before),
            format!(
                "appended {:?}: write, flush, atomic write of used, flush ({:?}) per word",
                self.words, self.flush_type
            ),
            format!("path: {}", self.ops.describe()),
            format!("used = {} at the end", self.used_after),
        ]
    }
}

/// The server side (`--file`: the log).
///
/// # Errors
/// If any step fails or the log's `used` is corrupt.
pub fn server<T: Transport>(t: &T, o: &ServerOpts) -> Result<ServerReport> {
    let peer = server_peer(t, &o.addr)?;
    let flush = if o.file.is_some() { Usage::FLUSH_TYPE_PERSISTENT } else { Usage::FLUSH_TYPE_VISIBILITY };
    let usage = Usage::WRITE_DST | Usage::READ_SRC | flush;
    let mem = match o.file_source() {
        Some(src) => {
            let mem = Mem::file(&peer, src, LOG_SIZE, usage, 0)?;
            if mem.mr.to_vec(0, LOG_SIGNATURE_SIZE)? != LOG_SIGNATURE {
                mem.mr.write(USED_OFFSET, &(DATA_OFFSET as u64).to_ne_bytes())?;
                mem.persist(USED_OFFSET, 8)?;
                mem.mr.write(0, &LOG_SIGNATURE)?;
                mem.persist(0, LOG_SIGNATURE_SIZE)?;
            }
            mem
        }
        None => {
            let init =
                |mr: &MrLocal<T>, _| Ok(mr.write(USED_OFFSET, &(DATA_OFFSET as u64).to_ne_bytes()).map(|()| 8)?);
            Mem::new(&peer, None, LOG_SIZE, usage, Some(&init))?
        }
    };
    let ep = Ep::listen(&peer, &o.addr, &o.port)?;
    o.ready.signal();
    let pdata = CommonData::new(USED_OFFSET as u16, &mem.mr.descriptor()).encode()?;
    let conn = accept(&ep, &o.stop, None, Some(&pdata), |_| Ok(()))?;
    wait_close_and_disconnect(conn)?;
    let mut used = [0u8; 8];
    mem.mr.read(USED_OFFSET, &mut used)?;
    let used = u64::from_ne_bytes(used);
    ensure!((DATA_OFFSET as u64..=LOG_SIZE as u64).contains(&used), "corrupt log: used = {used}");
    let data = mem.mr.to_vec(DATA_OFFSET, used as usize - DATA_OFFSET)?;
    let words =
        data.split(|&b| b == 0).filter(|w| !w.is_empty()).map(|w| String::from_utf8_lossy(w).into_owned()).collect();
    let pmem = mem.is_pmem();
    mem.dereg()?;
    ep.shutdown()?;
    Ok(ServerReport { words, used, pmem })
}

/// The client side (`--word W`, one or more).
///
/// # Errors
/// If no word is given, the log is full, or any step fails.
pub fn client<T: Transport>(t: &T, o: &ClientOpts) -> Result<ClientReport> {
    ensure!(!o.words.is_empty(), "atomic-write needs at least one --word");
    let peer = client_peer(t, &o.addr)?;
    let conn = connect(&peer, &o.addr, &o.port, None, None, o.retries, o.retry_delay)?;
    conn.apply_remote_peer_cfg(&PeerCfg::new().with_direct_write_to_pmem(true));
    let local = peer.alloc_mr(KILOBYTE, Usage::WRITE_SRC | Usage::READ_DST)?;
    let cd = CommonData::decode(conn.private_data())?;
    let remote = MrRemote::from_descriptor(&cd.mr_desc)?;
    let used_offset = usize::from(cd.data_offset);
    conn.read(local.slice(..8), remote.at(used_offset)).post()?;
    wait_wc(&conn.cq(), WcOpcode::RdmaRead)?;
    let mut b = [0u8; 8];
    local.read(0, &mut b)?;
    let used_before = u64::from_ne_bytes(b);
    ensure!(remote.len() > used_before, "Log size exhausted.");
    let flush_type = if remote.flush_type().contains(Usage::FLUSH_TYPE_PERSISTENT) {
        FlushType::Persistent
    } else {
        FlushType::Visibility
    };
    let mut used = used_before;
    let watch = OpWatch::start::<T>(peer.capabilities());
    for word in &o.words {
        let mut bytes = word.as_bytes().to_vec();
        bytes.push(0);
        let size = bytes.len();
        ensure!(size <= KILOBYTE, "word too long ({size} > {KILOBYTE} bytes)");
        ensure!(used + size as u64 <= remote.len(), "Log size exhausted.");
        let at = usize::try_from(used)?;
        local.write(0, &bytes)?;
        conn.write(remote.at(at), local.slice(..size)).flags(CompletionFlags::ON_ERROR).post()?;
        conn.flush(remote.slice(at..at + size), flush_type).flags(CompletionFlags::ON_ERROR).post()?;
        used += size as u64;
        conn.atomic_write(remote.at(used_offset), used.to_ne_bytes()).flags(CompletionFlags::ON_ERROR).post()?;
        conn.flush(remote.slice(used_offset..used_offset + 8), flush_type).context(FLUSH_ID).post()?;
        let wc = wait_flush(&conn.cq())?;
        ensure!(wc.wr_id() == FLUSH_ID, "unexpected wc.wr_id value ({:#x} != {FLUSH_ID:#x})", wc.wr_id());
        if flush_type == FlushType::Persistent {
            o.promise(Promise::Bytes { offset: at, bytes });
            o.promise(Promise::AtLeast { offset: used_offset, value: used });
        }
    }
    let n = o.words.len() as u64;
    let ops = watch.finish::<T>(2 * n, n);
    disconnect_and_wait_close(conn)?;
    local.dereg()?;
    Ok(ClientReport { used_before, words: o.words.clone(), used_after: used, flush_type, ops })
}

/// Both sides in one process (the log a file in `env.dir`): the words must be appended to
/// whatever the log held (the log persists from run to run, as the example's does; a log left
/// too full by earlier runs in the same `--dir` is started anew, so a demo is repeatable).
///
/// # Errors
/// If a side fails or the log does not end with the words appended after what it held.
pub fn demo<T: Transport>(t: &T, env: &DemoEnv) -> Result<Vec<String>> {
    let (ts, tc) = (t.clone(), t.clone());
    let path = env.dir.join("07-log.pmem");
    let words = ["rpma", "appends", "atomically"].map(String::from).to_vec();
    let needed: usize = words.iter().map(|w| w.len() + 1).sum();
    if let Ok(old) = std::fs::read(&path) {
        let used = old.get(USED_OFFSET..DATA_OFFSET).and_then(|b| b.try_into().ok()).map(u64::from_ne_bytes);
        if used.map_or(true, |u| u as usize + needed > LOG_SIZE) {
            std::fs::remove_file(&path).with_context(|| format!("removing the full log {}", path.display()))?;
        }
    }
    let mut so = env.server();
    so.file = Some(path.clone());
    let mut co = env.client();
    co.words = words;
    let (s, c) =
        run_pair(move |ready| server(&ts, &ServerOpts { ready, ..so }), vec![Box::new(move || client(&tc, &co))])?;
    ensure!(c[0].flush_type == FlushType::Persistent, "client flushed {:?}", c[0].flush_type);
    let (fl, aw) = (c[0].ops.counts.flush(), c[0].ops.counts.atomic_write());
    ensure!(fl.is_some() && aw.is_some(), "flushes or atomic writes not counted: {:?}", c[0].ops);
    ensure!(s.words.ends_with(&c[0].words), "log holds {:?}, client appended {:?}", s.words, c[0].words);
    let held: usize = s.words[..s.words.len() - c[0].words.len()].iter().map(|w| w.len() + 1).sum();
    ensure!(
        c[0].used_before == (DATA_OFFSET + held) as u64,
        "client read used = {} before appending, the log held {held} bytes of words",
        c[0].used_before
    );
    ensure!(s.used == c[0].used_after, "log used {} != {}", s.used, c[0].used_after);
    let file = std::fs::read(&path)?;
    ensure!(file.get(USED_OFFSET..DATA_OFFSET) == Some(&s.used.to_ne_bytes()[..]), "the file's used differs");
    Ok([side("server", &s), side("client", &c[0])].concat())
}
