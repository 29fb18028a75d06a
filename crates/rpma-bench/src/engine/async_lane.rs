//! `--async`: a client thread's connections driven through the async API (`rpma::tokio`) on a
//! current-thread tokio runtime of the thread's own.
//!
//! Each connection keeps `--qd` operations in flight as `--qd` futures on one task, each a loop
//! of "post one operation, await *its* completion" (`AsyncConn::write(..).await`, ...), all
//! joined; every operation is signaled and awaited on its own (`--cq-mod` does not apply). A
//! `write-flush` posts its write unsignaled (`post_unsignaled`) and awaits the flush, whose
//! completion retires both. Latency is the time from the post to the await's return. The
//! connections are made and ended as in the synchronous lanes (same protocol with the server):
//! the connection is handed to an `AsyncConn` after it is established and given back to end it.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use futures_util::future::try_join_all;
use hdrhistogram::Histogram;
use rpma::op::{self as rop, AnyKind};
use rpma::tokio::AsyncConn;
use rpma::{ConnEvent, FlushType, MrLocal, MrRemote, Transport};

use super::driver::{Driver, Phase, Span};
use super::lane::{Lane, Stop};
use super::protocol::{slot_offset, STOP_IMM};
use crate::op::{Op, ASYNC_OPS};

/// Progress is published every this many operations of a future.
const REPORT_EVERY: u64 = 256;

/// One connection on the async API.
struct AsyncLane<T: Transport> {
    conn: AsyncConn<T>,
    local: MrLocal<T>,
    remote: MrRemote,
    /// The span of the slots of operations on both regions.
    region: usize,
    /// The span of the slots of operations on the remote region alone (flush, atomic write).
    remote_region: usize,
    qd: usize,
    /// Whether each operation is timed (not `--no-latency`).
    clock: bool,
    /// The receive buffers the lane posted when it connected (held until the connection ends).
    _msgs: Option<MrLocal<T>>,
    /// The region the server writes for `write-pingpong` (not run here; held as the server
    /// was given its descriptor).
    _inbox: MrLocal<T>,
}

/// A client thread's connections and the runtime they are registered with.
pub(super) struct AsyncLanes<T: Transport> {
    // Dropped before the runtime: the connections deregister their fds from its reactor.
    lanes: Vec<AsyncLane<T>>,
    rt: tokio::runtime::Runtime,
}

impl<T: Transport> AsyncLanes<T> {
    /// A current-thread runtime and the lanes' connections on it.
    pub(super) fn new(lanes: Vec<Lane<T>>) -> Result<Self> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("building the client thread's tokio runtime")?;
        let mut out = Vec::with_capacity(lanes.len());
        {
            let _in_rt = rt.enter();
            for lane in lanes {
                let Lane { conn, local, msgs, remote, inbox, region, remote_region, qd, timeout, clock, .. } = lane;
                let conn = AsyncConn::new(conn).context("client: the connection on tokio")?;
                conn.set_timeout(Some(timeout)).context("client: the connection's timeout")?;
                out.push(AsyncLane {
                    conn,
                    local,
                    remote,
                    region,
                    remote_region,
                    qd,
                    clock,
                    _msgs: msgs,
                    _inbox: inbox,
                });
            }
        }
        Ok(Self { lanes: out, rt })
    }
}

impl<T: Transport> AsyncLane<T> {
    /// The offset of worker `slot`'s buffer for `op`.
    fn offset(&self, op: Op, size: usize, slot: usize) -> usize {
        let region = if matches!(op, Op::Flush | Op::AtomicWrite) { self.remote_region } else { self.region };
        slot_offset(slot, size, region)
    }

    /// The awaited operation `seq` at `off` (a `write-flush`'s flush: its write is posted
    /// first, unsignaled, by [`AsyncLane::worker`]).
    fn awaited(&self, op: Op, size: usize, off: usize, seq: u64) -> rpma::Result<rpma::op::Op<AnyKind<'_, T>>> {
        let r = &self.remote;
        let local = self.local.slice(off..off + size);
        Ok(match op {
            Op::Read => rop::read(local, r.at(off)).into(),
            Op::Write => rop::write(r.at(off), local).into(),
            Op::WriteFlush | Op::Flush => rop::flush(r.slice(off..off + size), FlushType::Persistent).into(),
            Op::AtomicWrite => rop::atomic_write(r.at(off & !7), seq.to_le_bytes()).into(),
            Op::Send | Op::SendImm | Op::WriteImm | Op::WritePingpong | Op::Connect => {
                return Err(rpma::Error::invalid_input(
                    "rpma bench --async",
                    "only one-sided operations are measured through the async API",
                ))
            }
        })
    }

    /// Worker `slot`'s loop: posts and awaits operations of `phase` on its own buffer until the
    /// lane has posted (`posted`) what the phase's `stop` allows; returns how many it completed.
    async fn worker(&self, slot: usize, posted: &Cell<u64>, phase: &Shared<'_>) -> Result<u64> {
        let Shared { op, size, stop, record, ref hist, done } = *phase;
        let off = self.offset(op, size, slot);
        let mut completed = 0u64;
        let mut unreported = 0u64;
        loop {
            let seq = posted.get();
            // The clock is read for the operation's latency, or for a phase of a given duration.
            let t0 = (self.clock || matches!(stop, Stop::Until(_))).then(Instant::now);
            let more = match stop {
                Stop::Count(n) => seq < n,
                Stop::Until(t) => t0.is_some_and(|t0| t0 < t),
            };
            if !more {
                break;
            }
            posted.set(seq + 1);
            // (No `with_context` on the way: it costs a call per operation even when all is
            // well; errors get their context here.)
            let failed = |e: rpma::Error| anyhow::Error::new(e).context(format!("{} of {size} B (async)", op.name()));
            if op == Op::WriteFlush {
                let write = rop::write(self.remote.at(off), self.local.slice(off..off + size));
                if let Err(e) = self.conn.post_unsignaled(write.context(seq)).await {
                    return Err(failed(e));
                }
            }
            let awaited = match self.awaited(op, size, off, seq) {
                Ok(a) => a,
                Err(e) => return Err(failed(e)),
            };
            if let Err(e) = self.conn.post(awaited).await {
                return Err(failed(e));
            }
            if let (true, true, Some(t0)) = (record, self.clock, t0) {
                let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
                hist.borrow_mut().saturating_record(ns.max(1));
            }
            completed += 1;
            unreported += 1;
            if unreported == REPORT_EVERY {
                done.fetch_add(unreported, Ordering::Relaxed);
                unreported = 0;
            }
        }
        done.fetch_add(unreported, Ordering::Relaxed);
        Ok(completed)
    }

    /// Ends the connection as the synchronous lane does: the stop message, then a disconnect.
    async fn finish(self) -> Result<()> {
        let c = &self.conn;
        c.post(rop::send_empty().imm(STOP_IMM)).await.context("sending stop")?;
        c.with_conn(|c| c.disconnect()).context("disconnecting")?;
        match c.next_event().await.context("client: waiting for the disconnect")? {
            ConnEvent::Closed => {}
            ev => bail!("client: unexpected connection event {ev:?}"),
        }
        let (conn, _) = self.conn.into_inner();
        conn.delete().context("deleting the connection")
    }
}

/// A phase as the workers of a thread's lanes share it: futures of one thread, to which the
/// phase's histogram is lent one at a time.
struct Shared<'a> {
    op: Op,
    size: usize,
    stop: Stop,
    record: bool,
    hist: RefCell<&'a mut Histogram<u64>>,
    done: &'a AtomicU64,
}

impl<T: Transport> Driver for AsyncLanes<T> {
    fn drive(&mut self, phase: Phase<'_>) -> Result<Span> {
        // Every operation is signaled and awaited on its own: the phase's `every` does not apply.
        let Phase { op, size, every: _, stop, record, hist, done } = phase;
        if matches!(stop, Stop::Count(0)) {
            let now = Instant::now();
            return Ok((0, now, now));
        }
        if !ASYNC_OPS.contains(&op) {
            bail!("--async measures {}, not {}", ASYNC_OPS.map(Op::name).join(", "), op.name());
        }
        let shared = Shared { op, size, stop, record, hist: RefCell::new(hist), done };
        let posted: Vec<Cell<u64>> = self.lanes.iter().map(|_| Cell::new(0)).collect();
        let lanes = &self.lanes;
        let (total, start, end) = self.rt.block_on(async {
            let workers = lanes.iter().zip(&posted).flat_map(|(lane, posted)| {
                let shared = &shared;
                (0..lane.qd).map(move |slot| lane.worker(slot, posted, shared))
            });
            let start = Instant::now();
            let counts = try_join_all(workers).await?;
            Ok::<_, anyhow::Error>((counts.into_iter().sum::<u64>(), start, Instant::now()))
        })?;
        Ok((total, start, end))
    }

    fn finish(self) -> Result<()> {
        let Self { lanes, rt } = self;
        for lane in lanes {
            rt.block_on(lane.finish())?;
        }
        Ok(())
    }
}
