//! `rpma log serve`: one replica on a region of pmem, a file or DRAM.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rpma::any::WithTransport;
use rpma::{Memory, Peer, Transport, Usage};
use rpma_log::{Replica, ReplicaOptions};

use crate::outln;
use rpma_scenarios::backend::dispatch_between_processes;
use rpma_scenarios::common::{server_peer, FileSource, Mem, MemFile};

use super::options::*;

struct Serve<'a>(&'a ServeArgs);

impl WithTransport for Serve<'_> {
    type Output = Result<()>;
    fn run<T: Transport>(self, t: T) -> Result<()> {
        let a = self.0;
        let peer = server_peer(&t, &a.addr)?;
        let pmem = a.pmem.is_some();
        let (memory, file) = region(&peer, a)?;
        let (replica, how) = if a.format {
            (Replica::format(&peer, memory, a.log_id)?, "formatted for a new log")
        } else if header_is_blank(&memory)? {
            let r = Replica::format_replacement(&peer, memory, a.log_id)?;
            (r, "blank: formatted as a replacement, it votes once a writer repaired it (--format starts a new log)")
        } else {
            let r = Replica::open(&peer, memory, a.log_id)
                .context("the region holds no valid log (--format formats it for a new log)")?;
            (r, "opened")
        };
        let direct = pmem || a.direct_pmem_write;
        let opts = ReplicaOptions::default().with_direct_write_to_pmem(direct);
        let mut replica = replica.with_options(opts).listen(&a.addr, &a.port.to_string())?;
        let st = replica.state()?;
        // The history with its tail (the commit word trails it), as a recovery would read it.
        let held = replica.check().map_or_else(
            |e| format!("history unreadable ({e})"),
            |c| format!("entries {}..{} (epoch {})", c.head_lsn, c.next_lsn, st.commit_epoch),
        );
        let place = file.as_ref().map_or_else(|| "DRAM".to_owned(), |f| f.path().display().to_string());
        outln!(
            "rpma log serve: log {:#x} on {}:{}, region of {} bytes in {place} ({}), ring {} bytes, {held}, direct \
             write to persistence: {}",
            a.log_id,
            a.addr,
            a.port,
            a.size,
            how,
            st.capacity,
            if direct { "yes" } else { "no" }
        )?;
        crate::out::flush()?;
        let stop = Arc::new(AtomicBool::new(false));
        if let Some(secs) = a.duration {
            let flag = Arc::clone(&stop);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs_f64(secs));
                flag.store(true, Ordering::Release);
            });
        }
        // Each writer taking the log over is reported with how long its request took here, from
        // its arrival (fencing the previous writer, the promise, the answer).
        while !stop.load(Ordering::Acquire) {
            let before = replica.takeovers();
            if replica.serve_once(opts.poll_interval)? && replica.takeovers() > before {
                let st = replica.state()?;
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                // A report nobody reads any more (its reader closed the pipe) does not stop the
                // replica: it serves on.
                let _ = outln!(
                    "rpma log serve: takeover {} (epoch {}) answered in {:.1} ms, at {:.3} s since the epoch",
                    replica.takeovers(),
                    st.promised,
                    replica.answered_in().unwrap_or_default().as_secs_f64() * 1e3,
                    now.as_secs_f64()
                );
                let _ = crate::out::flush();
            }
        }
        let takeovers = replica.takeovers();
        let st = replica.state()?;
        replica.into_memory().context("giving the region back")?;
        drop(file);
        outln!(
            "rpma log serve: stopped after {takeovers} writer takeover(s); committed position {} (epoch {})",
            st.commit,
            st.commit_epoch
        )?;
        Ok(())
    }
}

/// The replica's memory: the --pmem or --file mapping (through the scenarios' [`Mem`]), or DRAM.
fn region<T: Transport>(peer: &Peer<T>, a: &ServeArgs) -> Result<(Memory, Option<MemFile>)> {
    let path = a.pmem.as_ref().or(a.file.as_ref());
    let Some(path) = path else {
        return Ok((Memory::page_aligned(a.size).with_context(|| format!("allocating {} bytes", a.size))?, None));
    };
    let src = FileSource {
        path,
        create: a.file_create,
        map: Some(crate::file_map::map_file),
        offset: a.file_offset,
        pmem: a.pmem.is_some(),
    };
    Mem::file(peer, src, a.size, Usage::READ_SRC | Usage::WRITE_DST, 0)?.into_memory()
}

/// Whether the region's header area is all zeros (a new file or device range: formatted).
fn header_is_blank(m: &Memory) -> Result<bool> {
    let mut h = vec![0u8; rpma_log::HEADER_SIZE.min(m.len())];
    m.volatile().read(0, &mut h)?;
    Ok(h.iter().all(|&b| b == 0))
}

/// `rpma log serve`.
///
/// # Errors
/// Bad arguments (usage errors), a region that cannot be had or holds something else than an
/// empty region or this log, or a failing endpoint.
pub(crate) fn serve(a: &ServeArgs) -> Result<()> {
    check_serve(a).map_err(|e| rpma_scenarios::usage::usage(&e))?;
    dispatch_between_processes(a.backend, Serve(a))
}

fn check_serve(a: &ServeArgs) -> Result<()> {
    if a.file_offset != 0 && a.file.is_none() && a.pmem.is_none() {
        bail!("--file-offset needs --file or --pmem");
    }
    let min = rpma_log::HEADER_SIZE as u64 + rpma_log::MIN_CAPACITY;
    if (a.size as u64) < min {
        bail!(
            "--size {}: a replica's region holds a {}-byte header and a ring of at least {} bytes",
            a.size,
            rpma_log::HEADER_SIZE,
            rpma_log::MIN_CAPACITY
        );
    }
    if let Some(d) = a.duration {
        if d <= 0.0 {
            bail!("--duration must be positive");
        }
    }
    Ok(())
}
