//! The connection handshake of a writer with a replica: the request with the hello (the log
//! id, the epoch asked for, the writer id, open or reconnect), the replica's answer checked.

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags};
use rpma::runtime::Runtime;
use rpma::{Conn, ConnCfg, ConnEvent, ConnReq, ErrorKind, MrRemote, Peer, PeerCfg, Transport};

use super::clock;

use super::options::{FlushMode, LogOptions, ReplicaAddr, Wait};
use crate::error::{LogError, Result};
use crate::format::{self, Ask, Hello, Status};

/// Each replica connection's send (and completion) queue. A sync takes a handful of slots per
/// replica (its batch: a write and a flush per piece of its range, the commit word now and
/// then), so many syncs fit in flight to a replica that lags. Not more: with 512, rxe (6.12)
/// stopped completing a live replica's operations after another replica's process was killed
/// with hundreds of writes in flight to it (tests/verbs.rs).
pub(super) const SQ: u32 = 256;

/// How a replica answered a connection request.
pub(super) enum Connected<T: Transport> {
    /// Taken: the connection, the replica's region and its ring's bytes.
    Accepted(Conn<T>, MrRemote, u64),
    /// Refused: it promised the epoch given, above the one asked for.
    Stale(u64),
    /// Unreachable, or refused for another reason (why).
    Down(String),
}

/// Connects to replica `r` with a hello asking `ask` in `epoch` as `writer_id`.
pub(super) fn connect<T: Transport>(
    peer: &Peer<T>,
    r: &ReplicaAddr,
    opts: &LogOptions,
    hello: (u64, u64, Ask),
) -> Result<Connected<T>> {
    match request(peer, r, opts, hello)? {
        Ok(conn) => answered(conn, r, opts),
        Err(why) => Ok(Connected::Down(why)),
    }
}

/// The first half of [`connect`]: the connection request with the hello is sent (an open
/// sends every replica's before it waits for any answer). `Err(why)` inside: the replica is
/// down.
pub(super) fn request<T: Transport>(
    peer: &Peer<T>,
    r: &ReplicaAddr,
    opts: &LogOptions,
    (epoch, writer_id, ask): (u64, u64, Ask),
) -> Result<std::result::Result<Conn<T>, String>> {
    Ok(match conn_req(peer, r, opts)? {
        Ok(req) => send(req, opts, (epoch, writer_id, ask)),
        Err(why) => Err(why),
    })
}

/// A connection request to replica `r` as `opts` configures it (its CM id, address and route
/// resolved, its queue pair made), not sent yet. `Err(why)` inside: the replica is down.
pub(super) fn conn_req<T: Transport>(
    peer: &Peer<T>,
    r: &ReplicaAddr,
    opts: &LogOptions,
) -> Result<std::result::Result<ConnReq<T>, String>> {
    let mut cfg = ConnCfg::new().with_sq_size(SQ).with_cq_size(SQ).with_timeout(opts.timeout);
    if let Some(n) = opts.ack_timeout {
        cfg = cfg.with_ack_timeout(n);
    }
    if let Some(n) = opts.retry_count {
        cfg = cfg.with_retry_count(n);
    }
    match ConnReq::new(peer, &r.addr, &r.port, Some(&cfg)) {
        Ok(req) => Ok(Ok(req)),
        // A setting of the options out of range is the caller's, whichever replica.
        Err(e) if e.kind() == ErrorKind::InvalidInput => Err(e.into()),
        Err(e) => Ok(Err(format!("connecting: {e}"))),
    }
}

/// Sends `req` with the hello asking `ask` in `epoch` as `writer_id`.
pub(super) fn send<T: Transport>(
    req: ConnReq<T>,
    opts: &LogOptions,
    (epoch, writer_id, ask): (u64, u64, Ask),
) -> std::result::Result<Conn<T>, String> {
    let hello = format::encode_hello(Hello { log_id: opts.log_id, epoch, writer: writer_id, ask });
    req.connect(Some(&hello)).map_err(|e| format!("connecting: {e}"))
}

/// The answers to the requests sent to several replicas at once (`pending`: each replica's
/// index in `replicas` and its connection), each taken as soon as it arrives, whichever comes
/// first, until `opts.timeout` after the call (a replica that has not answered by then is down).
/// Taking an answer late is not only slower: on rxe the requester's connection manager sends
/// the last message of the handshake (RTU) when the event is taken, and a replica left waiting
/// for it while the writer awaits another one gives the connection up.
///
/// # Errors
/// As [`answered`] (a replica holding another log).
pub(super) fn answers<T: Transport>(
    rt: &dyn Runtime,
    mut pending: Vec<(usize, Conn<T>)>,
    replicas: &[ReplicaAddr],
    opts: &LogOptions,
) -> Result<Vec<(usize, Connected<T>)>> {
    let deadline = rt.now() + opts.timeout;
    let mut out = Vec::with_capacity(pending.len());
    while !pending.is_empty() {
        let mut fds: Vec<PollFd<'_>> =
            pending.iter().map(|(_, c)| PollFd::new(c.event_fd(), PollFlags::POLLIN)).collect();
        let woke = clock::readable(rt, &mut fds, deadline);
        let ready: Vec<bool> = fds.iter().map(|f| f.any().unwrap_or(false)).collect();
        drop(fds);
        match woke {
            Ok(0) if rt.now() >= deadline => {
                let why = format!("connecting: no answer within {:?}", opts.timeout);
                out.extend(pending.drain(..).map(|(i, _)| (i, Connected::Down(why.clone()))));
            }
            Ok(_) | Err(Errno::EINTR) => {
                for k in (0..pending.len()).rev().filter(|&k| ready[k]) {
                    let (i, conn) = pending.swap_remove(k);
                    out.push((i, answered(conn, &replicas[i], opts)?));
                }
            }
            Err(e) => {
                let why = format!("connecting: waiting for the answers: {e}");
                out.extend(pending.drain(..).map(|(i, _)| (i, Connected::Down(why.clone()))));
            }
        }
    }
    Ok(out)
}

/// The second half of [`connect`]: takes replica `r`'s answer on `conn` (waiting up to
/// `opts.timeout`) and checks it.
pub(super) fn answered<T: Transport>(conn: Conn<T>, r: &ReplicaAddr, opts: &LogOptions) -> Result<Connected<T>> {
    match conn.next_event_timeout(opts.timeout) {
        Ok(ConnEvent::Established) => {}
        Ok(ev) => return Ok(Connected::Down(format!("connecting: {}", ev.as_str()))),
        Err(e) => return Ok(Connected::Down(format!("connecting: {e}"))),
    }
    let Some(reply) = format::decode_reply(conn.private_data()) else {
        let _ = conn.disconnect();
        return Ok(Connected::Down("its reply is not an rpma-log reply".into()));
    };
    if reply.log_id != opts.log_id || reply.status == Status::WrongLogId as u32 {
        let _ = conn.disconnect();
        return Err(LogError::WrongLogId { replica: r.to_string(), expected: opts.log_id, found: reply.log_id });
    }
    match reply.status {
        s if s == Status::Accepted as u32 => {}
        s if s == Status::StaleEpoch as u32 => {
            let _ = conn.disconnect();
            return Ok(Connected::Stale(reply.promised));
        }
        s => {
            let _ = conn.disconnect();
            return Ok(Connected::Down(format!("it refused the writer (status {s})")));
        }
    }
    let remote = MrRemote::from_descriptor(&reply.rest[..MrRemote::DESCRIPTOR_SIZE])?;
    let pcfg = PeerCfg::from_descriptor(&reply.rest[MrRemote::DESCRIPTOR_SIZE..])?;
    if opts.flush == FlushMode::Persistent && !pcfg.direct_write_to_pmem() {
        let _ = conn.disconnect();
        return Ok(Connected::Down(
            "it does not write to persistent memory directly: persistent flushes are impossible (a writer \
             flushing to visibility, FlushMode::Visibility, is served)"
                .into(),
        ));
    }
    conn.apply_remote_peer_cfg(&pcfg);
    if opts.wait == Wait::Sleep {
        // The events are taken only once poll(2) saw them: never a blocking read.
        if let Err(e) = conn.cq().set_nonblocking(true) {
            let _ = conn.disconnect();
            return Ok(Connected::Down(format!("making its completion channel non-blocking: {e}")));
        }
    }
    if reply.capacity < format::MIN_CAPACITY || reply.capacity % 8 != 0 {
        return Err(LogError::Capacity {
            replica: r.to_string(),
            detail: format!("it announces a ring of {} bytes", reply.capacity),
        });
    }
    Ok(Connected::Accepted(conn, remote, reply.capacity))
}
