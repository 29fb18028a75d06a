//! The server side: accepts the clients' connections and echoes their messages (and
//! `write-pingpong` phases) until each client says stop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use rpma::{Conn, ConnEvent, Ep, ErrorKind, MrLocal, MrRemote, Peer, PeerCfg, Transport, Usage, Wc};

use super::protocol::*;
use super::wait::{self, ClientGaveUp, Idle};
use crate::plan::Plan;
use rpma_scenarios::common::{poll_event, MapFile};

/// One accepted connection with its memory.
pub(super) struct Served<T: Transport> {
    pub(super) conn: Conn<T>,
    pub(super) target: MrLocal<T>,
    /// Receive slots `0..=qd` of `recv_slot` bytes.
    pub(super) recvs: MrLocal<T>,
    pub(super) recv_slot: usize,
    /// The buffer echoes and pongs are sent from (none if the run sends none).
    pub(super) source: Option<MrLocal<T>>,
    /// The client's inbox (`write-pingpong`).
    pub(super) inbox: MrRemote,
    pub(super) req: Request,
    pub(super) busy_poll: bool,
    /// Sleep as soon as the CQ is empty (`--sleep-when-idle`).
    pub(super) sleep_when_idle: bool,
    /// Sleep in `poll(2)` on the CQ's and the connection's fds, without a timeout, and take
    /// the completion event once the CQ is drained, as the C program's server does
    /// (`--sleep-when-idle` on a backend whose fds exist anyway: not the mock, which makes them
    /// on demand). No timer is armed per sleep: the protocol's stop message ends the service,
    /// and a client gone without it wakes the poll with its connection's end, the server's own
    /// client in one process too (its connections are dropped before it raises the abort
    /// flag, which the server reads on every wake).
    pub(super) poll_fds: bool,
    /// How long any wait may last without progress (`--timeout`).
    pub(super) timeout: Duration,
}

impl<T: Transport> Served<T> {
    /// Re-posts the receive of slot `wr_id & !RECV_TAG`.
    fn repost(&self, wr_id: u64) -> Result<()> {
        let slot = (wr_id & !RECV_TAG) as usize;
        let n = self.recv_slot;
        self.conn
            .recv(self.recvs.slice(slot * n..(slot + 1) * n))
            .context(wr_id)
            .post()
            .context("server: posting a receive")
    }
}

/// Accepts a connection and sets up what serving it takes (the target region on `--pmem`
/// mapped by `map`).
pub(super) fn accept<T: Transport>(
    peer: &Peer<T>,
    ep: &Ep<T>,
    plan: &Plan,
    map: Option<MapFile>,
    abort: &AtomicBool,
) -> Result<Served<T>> {
    let (qd_limit, busy_poll, sleep_when_idle, timeout) = (plan.qd, plan.busy_poll, plan.sleep_when_idle, plan.timeout);
    wait::conn_request(ep, abort)?;
    let cfg = conn_cfg::<T>(qd_limit, plan.retry);
    let req = ep.next_conn_req(Some(&cfg)).context("receiving a connection request")?;
    let (r, inbox) = match parse_request(req.private_data()) {
        Ok((r, inbox)) if r.qd <= qd_limit => (r, inbox),
        Ok((r, _)) => {
            let _ = req.delete();
            bail!("a client asks for queue depth {}, above this server's --qd {qd_limit}", r.qd);
        }
        Err(e) => {
            let _ = req.delete();
            return Err(e);
        }
    };
    let usage = Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_PERSISTENT | Usage::FLUSH_TYPE_VISIBILITY;
    // Only what the client's operations use: a write-only run receives nothing but zero-length
    // control messages and sends nothing.
    let len = region_len(r.target_max, r.qd).max(PLACEHOLDER);
    let target = match &plan.pmem {
        // `--pmem`: the target region on persistent memory (a devdax range; MAP_SYNC required)
        Some((path, offset)) => {
            let map = map.ok_or_else(|| anyhow!("--pmem: this program maps no file"))?;
            let mem = map(path, *offset, len, false, true)
                .with_context(|| format!("mapping --pmem {} at {offset}", path.display()))?;
            peer.reg_mr(mem, usage).context("registering the target region on pmem")?
        }
        None => peer.alloc_mr(len, usage).context("registering the target region")?,
    };
    // (A connection request cannot post zero-length receives: placeholders for the control
    // messages then.)
    let recv_slot = r.recv_max.max(PLACEHOLDER);
    let recvs = peer.alloc_mr((r.qd + 1) * recv_slot, Usage::RECV).context("registering receive buffers")?;
    let source = match r.source_max {
        0 => None,
        n => {
            let mut m = peer.alloc_mr(n, Usage::SEND | Usage::WRITE_SRC).context("registering the source buffer")?;
            fill_source(&mut m);
            Some(m)
        }
    };
    for slot in 0..=r.qd {
        req.recv(recvs.slice(slot * recv_slot..(slot + 1) * recv_slot))
            .context(RECV_TAG | slot as u64)
            .post()
            .context("posting a receive")?;
    }
    let pcfg = PeerCfg::new().with_direct_write_to_pmem(true);
    let mut pdata = target.descriptor().to_vec();
    pdata.extend_from_slice(&pcfg.descriptor());
    let conn = req.connect(Some(&pdata)).context("accepting a connection")?;
    match wait::next_event(&conn, timeout, "server: waiting for the connection to be established")? {
        ConnEvent::Established => {}
        ev => bail!("server: unexpected connection event {ev:?}"),
    }
    let poll_fds = sleep_when_idle && peer.device().transport().name() != "mock";
    if poll_fds {
        // Its waits then take what poll(2) saw without touching the fd's flags again.
        conn.cq().set_nonblocking(true).context("server: making the CQ's fd non-blocking")?;
    }
    Ok(Served { conn, target, recvs, recv_slot, source, inbox, req: r, busy_poll, sleep_when_idle, poll_fds, timeout })
}

/// Checks a server's completion during a `write-pingpong`: only its own sends may complete.
pub(super) fn pingpong_wc(wc: &Wc) -> Result<()> {
    check(wc, "server")?;
    if wc.wr_id() & RECV_TAG != 0 {
        bail!("server: the client sent a message during a write ping-pong");
    }
    Ok(())
}

/// Serves a `write-pingpong` phase of `size`-byte messages (see the module's documentation).
pub(super) fn pingpong<T: Transport>(s: &Served<T>, size: usize) -> Result<()> {
    let Some(source) = s.source.as_ref().filter(|_| size > 0 && size <= s.req.source_max.min(s.target.len())) else {
        bail!(
            "server: the client asks for a write ping-pong of {size} B, outside 1..={} (its request)",
            s.req.source_max
        );
    };
    if (s.inbox.len() as usize) < size {
        bail!("server: the client asks for a write ping-pong of {size} B, beyond its inbox");
    }
    let at = size - 1;
    // The client writes the target and the NIC reads the pong's source: both are reached
    // through their volatile views, byte by byte (a plain read of the polled byte could be
    // hoisted out of the loop).
    let (target, msgs) = (s.target.volatile(), source.volatile());
    target.store_u8(at, 0).context("server: clearing the ping-pong byte")?;
    s.conn.send_empty().context(PP_CTL_ID).post().context("server: answering a ping-pong start")?;
    let mut wcs = [Wc::EMPTY; WC_BATCH];
    let mut prev = 0u8;
    let mut idle = 0u32;
    let mut waiting = Idle::new(s.timeout);
    loop {
        let v = target.load_u8(at).context("server: reading the ping-pong byte")?;
        if v == prev {
            idle = idle.wrapping_add(1);
            waiting.tick(|| {
                format!("server: waiting for ping {} of a write ping-pong of {size} B", prev.wrapping_add(1))
            })?;
            if idle % SERVER_SPINS == 0 {
                // A broken connection flushes the posted receives: look now and then.
                let n = s.conn.cq().poll(&mut wcs).context("server: polling")?;
                wcs[..n].iter().try_for_each(pingpong_wc)?;
                if !s.busy_poll {
                    std::thread::yield_now();
                }
            }
            std::hint::spin_loop();
            continue;
        }
        idle = 0;
        waiting.progress();
        if v == prev.wrapping_add(2) {
            return Ok(()); // the end of the phase
        }
        if v != prev.wrapping_add(1) {
            bail!("server: write ping-pong number {v} after {prev}");
        }
        prev = v;
        msgs.store_u8(at, v).context("server: writing the pong byte")?;
        s.conn.write(s.inbox.at(0), source.slice(..size)).context(PP_ID).post().context("server: writing a pong")?;
        let mut waiting = Idle::new(s.timeout);
        'wait: loop {
            let n = s.conn.cq().poll(&mut wcs).context("server: polling")?;
            for wc in &wcs[..n] {
                pingpong_wc(wc)?;
                if wc.wr_id() == PP_ID {
                    break 'wait;
                }
            }
            if n == 0 {
                waiting.tick(|| format!("server: waiting for the completion of pong {v} of {size} B"))?;
                std::hint::spin_loop();
            }
        }
    }
}

/// Echoes messages until the stop message, then waits for the client to disconnect.
///
/// Idle, the server waits for the client's next message for as long as the client's one-sided
/// phases last (they send the server nothing), so that wait has no `--timeout`: it ends on the
/// client's failure (`abort`, one process) or on a connection event (the client disconnected
/// or was lost without its stop message).
pub(super) fn serve<T: Transport>(s: Served<T>, abort: &AtomicBool) -> Result<()> {
    let cq = s.conn.cq();
    let mut wcs = [Wc::EMPTY; WC_BATCH];
    let mut idle = 0u32;
    // A connection event seen while idle: completions that came before it (the stop message)
    // are polled first.
    let mut ended = None;
    // A completion event poll(2) saw and not yet taken (`--sleep-when-idle` on real fds).
    let mut event = false;
    'serve: loop {
        let n = cq.poll(&mut wcs).context("server: polling")?;
        if n == 0 {
            if let Some(ev) = ended {
                bail!("server: the connection ended ({ev:?}) before the client's stop message");
            }
            idle += 1;
            if s.busy_poll {
                // Spins as the C program's server does: no pause hint (under QEMU's TCG each
                // PAUSE leaves the translated code for the emulator's loop), and every
                // SERVER_SPINS-th empty poll a non-blocking look at the connection's events (a
                // client lost without its stop message ends the run).
                if idle % SERVER_SPINS == 0 {
                    ended = poll_event(&s.conn, nix::poll::PollTimeout::ZERO).context("server: a connection event")?;
                    if abort.load(Ordering::Acquire) {
                        return Err(ClientGaveUp.into());
                    }
                }
            } else if idle < SERVER_SPINS && !s.sleep_when_idle {
                std::hint::spin_loop();
            } else if idle < SERVER_SPINS + SERVER_YIELDS && !s.sleep_when_idle {
                std::thread::yield_now();
            } else if s.poll_fds && event {
                // Drained: now take the event that woke the server, which re-arms the CQ, and
                // poll once more before sleeping (a completion between the last poll and the
                // re-arming raises no event). Taken only now, the CQ stayed unarmed while the
                // server echoed, so the echo's own completion raised no second event: one
                // event and four system calls a message (poll, the echo's doorbell, read, the
                // re-arming ioctl), where taking it at once costs two events and seven.
                event = false;
                match cq.wait() {
                    Ok(()) => idle = 0,
                    Err(e) if e.kind() == ErrorKind::NoCompletion => {}
                    Err(e) => return Err(e).context("server: taking a completion event"),
                }
            } else if s.poll_fds {
                // The CQ is armed: a completion after the poll above still comes as an event.
                // One poll(2) on both fds, without a timeout; the event is taken once the CQ is
                // drained (above).
                let mut fds = [
                    nix::poll::PollFd::new(cq.fd(), nix::poll::PollFlags::POLLIN),
                    nix::poll::PollFd::new(s.conn.event_fd(), nix::poll::PollFlags::POLLIN),
                ];
                match nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE) {
                    Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                    Err(e) => return Err(e).context("server: polling the CQ's and the connection's fds"),
                }
                let [cq_fd, ev_fd] = fds.map(|f| f.any().unwrap_or(false));
                if cq_fd {
                    event = true;
                    idle = 0;
                }
                if ev_fd {
                    ended = Some(s.conn.next_event().context("server: a connection event")?);
                }
                if abort.load(Ordering::Acquire) {
                    return Err(ClientGaveUp.into());
                }
            } else {
                // The CQ is armed: a completion after the poll above still comes as an event.
                // Timed waits, not a poll(2) of the two fds: on the mock they need no fd, so a
                // thousand connections fit in the default limit of 1024 fds.
                match cq.wait_timeout(SERVER_IDLE_WAIT) {
                    Ok(()) => idle = 0,
                    Err(e) if e.kind() == ErrorKind::NoCompletion => {
                        match s.conn.next_event_timeout(Duration::from_millis(1)) {
                            Ok(ev) => ended = Some(ev),
                            Err(e) if e.kind() == ErrorKind::NoEvent => {}
                            Err(e) => return Err(e).context("server: a connection event"),
                        }
                        if abort.load(Ordering::Acquire) {
                            return Err(ClientGaveUp.into());
                        }
                    }
                    Err(e) => return Err(e).context("server: waiting for completions"),
                }
            }
            continue;
        }
        idle = 0;
        for wc in &wcs[..n] {
            check(wc, "server")?;
            if wc.wr_id() & RECV_TAG == 0 {
                continue; // an echo's send completion
            }
            let slot = (wc.wr_id() & !RECV_TAG) as usize;
            match wc.imm_data() {
                Some(STOP_IMM) => break 'serve,
                Some(imm) if imm & PINGPONG_BIT != 0 => {
                    s.repost(wc.wr_id())?;
                    pingpong(&s, (imm & !PINGPONG_BIT) as usize)?;
                    continue;
                }
                _ => {}
            }
            // Echo first, then re-post the receive: `qd + 1` receives are posted, so the client
            // (at most `qd` messages in flight) always finds one.
            // The echo goes out of the source buffer, filled once: nothing is copied.
            let len = (wc.byte_len() as usize).min(s.req.source_max);
            let echo = match &s.source {
                Some(src) if len > 0 => s.conn.send(src.slice(..len)),
                _ => s.conn.send_empty(),
            };
            echo.context(SEND_TAG | slot as u64).post().context("server: echoing")?;
            s.repost(wc.wr_id())?;
        }
    }
    let ev = match ended {
        Some(ev) => ev,
        None => wait::next_event(&s.conn, s.timeout, "server: waiting for the client to disconnect")?,
    };
    match ev {
        ConnEvent::Closed => {}
        ev => bail!("server: unexpected connection event {ev:?}"),
    }
    s.conn.delete().context("server: deleting the connection")?;
    Ok(())
}

/// Accepts `conns` connections and serves each on its own thread (a single one on this
/// thread); `map` maps the `--pmem` target.
pub(super) fn run_server<T: Transport>(
    peer: &Peer<T>,
    ep: &Ep<T>,
    plan: &Plan,
    map: Option<MapFile>,
    abort: &AtomicBool,
) -> Result<()> {
    if plan.conns == 1 {
        // On this thread: a server process that never had a second thread pays less for each
        // system call (glibc's wrappers), as the C program's server does.
        return serve(accept(peer, ep, plan, map, abort)?, abort);
    }
    std::thread::scope(|sc| {
        let mut handles = Vec::new();
        for _ in 0..plan.conns {
            let served = accept(peer, ep, plan, map, abort)?;
            handles.push(sc.spawn(move || serve(served, abort)));
        }
        for h in handles {
            h.join().map_err(|_| anyhow::anyhow!("a server thread panicked"))??;
        }
        Ok(())
    })
}
