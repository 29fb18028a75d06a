//! Multi-threaded stress (THREAD_SAFETY, docs/semantics.md#thread-safety): many threads
//! share one peer per side, the memory regions and every connection (each behind a `Mutex`: a
//! connection is `Send`, not `Sync`), and post mixed operations
//! (write, read, atomic write, flush, write with imm, send, send with imm, recv) on connections
//! picked at random, polling whichever CQ they wait on and routing what they poll to its owner.
//!
//! Checked: every posted work request completes exactly once, successfully and with the right
//! opcode (counted by `wr_id`: a completion of an unknown or already retired `wr_id` fails the
//! run); every message is delivered exactly once and intact (the receiver checks the header and
//! the body pattern, or the immediate data of a write with imm); the data read back is the data
//! written (each thread keeps a model of its slice of every target region; the whole regions are
//! compared at the end); nothing stays queued; no deadlock (a wait longer than 10 s, or a
//! run longer than its budget, fails the run: it never hangs).
//!
//! Knobs (environment): `RPMA_STRESS_THREADS` (default 8), `RPMA_STRESS_CONNS` (16),
//! `RPMA_STRESS_OPS` (operations per thread, 3200: 200 per connection), `RPMA_STRESS_SEED`; `RPMA_SOAK_SECS=N` turns
//! the run into a soak: each thread keeps going for N seconds instead of a fixed count.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use rpma::{
    CompletionFlags, Conn, ConnCfg, ConnEvent, ConnReq, Ep, ErrorKind, FlushType, MrLocal, MrRemote, Peer, Transport,
    Usage, Wc, WcOpcode, WcStatus,
};

use super::harness::{mr, peer, remote, Backend, Case};
use crate::cases;

pub fn cases<B: Backend>() -> Vec<Case<B>> {
    cases![stress__threads_share_peer_and_connections]
}

/// Bytes of each thread's slice of a region.
const SLOT: usize = 512;
/// The longest a single wait may take before the run fails (a lost completion or a deadlock
/// fails here instead of hanging).
const STALL: Duration = Duration::from_secs(10);

struct Knobs {
    threads: usize,
    conns: usize,
    ops: u64,
    soak: Option<Duration>,
    seed: u64,
}

fn env_num(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

fn knobs() -> Knobs {
    let threads = env_num("RPMA_STRESS_THREADS", 8) as usize;
    assert!((1..=255).contains(&threads), "RPMA_STRESS_THREADS must be 1..=255");
    let conns = env_num("RPMA_STRESS_CONNS", 16).max(1) as usize;
    let soak = std::env::var("RPMA_SOAK_SECS").ok().map(|_| Duration::from_secs(env_num("RPMA_SOAK_SECS", 0)));
    Knobs { threads, conns, ops: env_num("RPMA_STRESS_OPS", 3200), soak, seed: env_num("RPMA_STRESS_SEED", 0x57_2E55) }
}

/// One connection with its regions: the client posts, the server's regions are the targets.
struct Lane<T: Transport> {
    client: Mutex<Conn<T>>,
    server: Mutex<Conn<T>>,
    /// Server region the client writes, reads, atomically writes and flushes (a slot per thread).
    target: MrLocal<T>,
    /// The client's view of `target`.
    rtarget: MrRemote,
    /// Server receive buffers (a slot per thread).
    rbuf: MrLocal<T>,
    /// Client region: per thread a source slot then a destination slot.
    local: MrLocal<T>,
}

/// The state of one posted work request, in its owner's shard.
enum Slot {
    Pending,
    Done(Wc),
}

/// Shared bookkeeping: per-thread shards of outstanding work requests, message accounting and
/// the first failure.
struct Book {
    shards: Vec<Mutex<HashMap<u64, Slot>>>,
    /// Message token -> (sent, delivered).
    messages: Mutex<HashMap<u32, (u32, u32)>>,
    posted: AtomicU64,
    completed: AtomicU64,
    failed: AtomicBool,
    error: Mutex<Option<String>>,
    deadline: Instant,
}

fn lock<X>(m: &Mutex<X>) -> std::sync::MutexGuard<'_, X> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Book {
    fn fail(&self, msg: String) -> String {
        self.failed.store(true, Ordering::SeqCst);
        lock(&self.error).get_or_insert_with(|| msg.clone());
        msg
    }

    fn expect(&self, wr_id: u64) {
        let t = owner(wr_id);
        let prev = lock(&self.shards[t]).insert(wr_id, Slot::Pending);
        assert!(prev.is_none(), "wr_id {wr_id:#x} reused while outstanding");
        self.posted.fetch_add(1, Ordering::Relaxed);
    }

    /// Routes a polled completion to its owner's shard.
    fn route(&self, wc: Wc) -> Result<(), String> {
        let t = owner(wc.wr_id());
        if t >= self.shards.len() {
            return Err(self.fail(format!("completion of a wr_id nobody posted: {wc:?}")));
        }
        let mut g = lock(&self.shards[t]);
        match g.get_mut(&wc.wr_id()) {
            Some(s @ Slot::Pending) => {
                *s = Slot::Done(wc);
                self.completed.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Some(Slot::Done(first)) => {
                Err(self.fail(format!("second completion of {:#x}: {first:?} then {wc:?}", wc.wr_id())))
            }
            None => Err(self.fail(format!("completion of a retired or unknown wr_id: {wc:?}"))),
        }
    }

    fn take(&self, wr_id: u64) -> Option<Wc> {
        let mut g = lock(&self.shards[owner(wr_id)]);
        if matches!(g.get(&wr_id), Some(Slot::Done(_))) {
            if let Some(Slot::Done(wc)) = g.remove(&wr_id) {
                return Some(wc);
            }
        }
        None
    }

    /// Fails if another thread failed, the whole run is past its deadline, or the current wait
    /// (begun at `since`) stalled for longer than [`STALL`].
    fn check_alive(&self, since: Instant) -> Result<(), String> {
        if self.failed.load(Ordering::SeqCst) {
            return Err("stopped: another thread failed".to_owned());
        }
        let now = Instant::now();
        if now > self.deadline {
            return Err(self.fail("the run passed its deadline (deadlock or lost completions)".into()));
        }
        if now.duration_since(since) > STALL {
            return Err(
                self.fail(format!("an operation did not complete within {STALL:?} (deadlock or lost completion)"))
            );
        }
        Ok(())
    }
}

/// `wr_id` layout: thread in bits 40.., sequence in 1..40, bit 0 = receive.
fn wr_id(thread: usize, seq: u64, recv: bool) -> u64 {
    ((thread as u64) << 40) | ((seq & 0x7F_FFFF_FFFF) << 1) | u64::from(recv)
}

fn owner(wr_id: u64) -> usize {
    (wr_id >> 40) as usize
}

/// The token of a message (fits the 32-bit immediate data).
fn token(thread: usize, seq: u64) -> u32 {
    ((thread as u32) << 24) | (seq as u32 & 0x00FF_FFFF)
}

/// `n` bytes of a pattern that differs per `seed`.
fn pattern(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A message: its 4-byte token then the pattern of the token.
fn message(tok: u32, len: usize) -> Vec<u8> {
    let mut m = tok.to_le_bytes().to_vec();
    m.extend_from_slice(&pattern(u64::from(tok), len - 4));
    m
}

struct Worker<'a, T: Transport> {
    t: usize,
    lanes: &'a [Lane<T>],
    book: &'a Book,
    rng: fastrand::Rng,
    seq: u64,
    /// This thread's model of its slot in every lane's target region.
    model: Vec<Vec<u8>>,
    native_atomic: bool,
    native_flush: bool,
}

impl<T: Transport> Worker<'_, T> {
    fn next_id(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn src(&self) -> usize {
        self.t * 2 * SLOT
    }

    fn dst(&self) -> usize {
        self.t * 2 * SLOT + SLOT
    }

    /// Polls the lane's CQs (the server's only when waiting for a receive) until every id in
    /// `ids` completed; returns their completions in the same order.
    fn wait(&self, lane: &Lane<T>, ids: &[u64], server_too: bool) -> Result<Vec<Wc>, String> {
        let mut got: Vec<Option<Wc>> = vec![None; ids.len()];
        let mut buf = [Wc::EMPTY; 8];
        let since = Instant::now();
        loop {
            for (i, id) in ids.iter().enumerate() {
                if got[i].is_none() {
                    got[i] = self.book.take(*id);
                }
            }
            if got.iter().all(Option::is_some) {
                return Ok(got.into_iter().flatten().collect());
            }
            self.book.check_alive(since)?;
            let mut polled = false;
            let sides = [Some(&lane.client), server_too.then_some(&lane.server)];
            for side in sides.into_iter().flatten() {
                let polled_now = lock(side).cq().poll(&mut buf);
                match polled_now {
                    Ok(0) => {}
                    Ok(n) => {
                        polled = true;
                        for wc in &buf[..n] {
                            self.book.route(*wc)?;
                        }
                    }
                    Err(e) => return Err(self.book.fail(format!("thread {}: poll: {e}", self.t))),
                }
            }
            if !polled {
                std::thread::yield_now();
            }
        }
    }

    fn check_wc(&self, wc: &Wc, opcode: WcOpcode) -> Result<(), String> {
        if wc.status() != WcStatus::Success || wc.opcode() != opcode {
            return Err(self.book.fail(format!("thread {}: expected a successful {opcode:?}, got {wc:?}", self.t)));
        }
        Ok(())
    }

    fn post(&self, what: &str, r: rpma::Result<()>) -> Result<(), String> {
        r.map_err(|e| self.book.fail(format!("thread {}: {what}: {e}", self.t)))
    }

    /// A random sub-range of the slot.
    fn range(&mut self) -> (usize, usize) {
        let off = self.rng.usize(..SLOT);
        let len = self.rng.usize(1..=SLOT - off);
        (off, len)
    }

    fn one(&mut self) -> Result<(), String> {
        let c = self.rng.usize(..self.lanes.len());
        let lanes = self.lanes;
        let lane = &lanes[c];
        let base = self.t * SLOT;
        let all = CompletionFlags::ALWAYS;
        match self.rng.u8(..7) {
            0 => {
                let (off, len) = self.range();
                let data = pattern(self.rng.u64(..), len);
                self.post("local write", lane.local.write(self.src(), &data))?;
                let id = wr_id(self.t, self.next_id(), false);
                self.book.expect(id);
                self.post(
                    "write",
                    lock(&lane.client)
                        .write(lane.rtarget.at(base + off), lane.local.slice(self.src()..self.src() + len))
                        .flags(all)
                        .context(id)
                        .post(),
                )?;
                self.check_wc(&self.wait(lane, &[id], false)?[0], WcOpcode::RdmaWrite)?;
                self.model[c][off..off + len].copy_from_slice(&data);
            }
            1 => {
                let (off, len) = self.range();
                let id = wr_id(self.t, self.next_id(), false);
                self.book.expect(id);
                self.post(
                    "read",
                    lock(&lane.client)
                        .read(lane.local.slice(self.dst()..self.dst() + len), lane.rtarget.at(base + off))
                        .flags(all)
                        .context(id)
                        .post(),
                )?;
                self.check_wc(&self.wait(lane, &[id], false)?[0], WcOpcode::RdmaRead)?;
                let got = lane.local.to_vec(self.dst(), len).map_err(|e| self.book.fail(e.to_string()))?;
                if got != self.model[c][off..off + len] {
                    return Err(self.book.fail(format!(
                        "thread {}: lane {c}: read [{off}, +{len}) differs from what was written",
                        self.t
                    )));
                }
            }
            2 => {
                let off = self.rng.usize(..SLOT / 8) * 8;
                let v = self.rng.u64(..).to_le_bytes();
                let id = wr_id(self.t, self.next_id(), false);
                self.book.expect(id);
                self.post(
                    "atomic_write",
                    lock(&lane.client).atomic_write(lane.rtarget.at(base + off), v).flags(all).context(id).post(),
                )?;
                let op = if self.native_atomic { WcOpcode::AtomicWrite } else { WcOpcode::RdmaWrite };
                self.check_wc(&self.wait(lane, &[id], false)?[0], op)?;
                self.model[c][off..off + 8].copy_from_slice(&v);
            }
            3 => {
                let (off, len) = self.range();
                let id = wr_id(self.t, self.next_id(), false);
                self.book.expect(id);
                self.post(
                    "flush",
                    lock(&lane.client)
                        .flush(lane.rtarget.slice(base + off..base + off + len), FlushType::Visibility)
                        .flags(all)
                        .context(id)
                        .post(),
                )?;
                let op = if self.native_flush { WcOpcode::Flush } else { WcOpcode::RdmaRead };
                self.check_wc(&self.wait(lane, &[id], false)?[0], op)?;
            }
            kind => self.message(c, kind)?,
        }
        Ok(())
    }

    /// Posts a receive in this thread's slot of the lane, then a write with imm (`kind` 4), a
    /// send (5) or a send with imm (6); waits for both; checks what landed in the slot (a
    /// message of any thread, or the imm of any thread's write).
    fn message(&mut self, c: usize, kind: u8) -> Result<(), String> {
        let lanes = self.lanes;
        let lane = &lanes[c];
        let base = self.t * SLOT;
        let all = CompletionFlags::ALWAYS;
        let seq = self.next_id();
        let (rid, sid) = (wr_id(self.t, seq, true), wr_id(self.t, seq, false));
        let tok = token(self.t, seq);
        self.book.expect(rid);
        self.post("recv", lock(&lane.server).recv(lane.rbuf.slice(base..base + SLOT)).context(rid).post())?;
        self.book.expect(sid);
        let sop = if kind == 4 {
            let (off, len) = self.range();
            let data = pattern(u64::from(tok), len);
            self.post("local write", lane.local.write(self.src(), &data))?;
            lock(&self.book.messages).entry(tok).or_default().0 += 1;
            self.post(
                "write_with_imm",
                lock(&lane.client)
                    .write(lane.rtarget.at(base + off), lane.local.slice(self.src()..self.src() + len))
                    .imm(tok)
                    .flags(all)
                    .context(sid)
                    .post(),
            )?;
            self.model[c][off..off + len].copy_from_slice(&data);
            WcOpcode::RdmaWrite
        } else {
            let len = self.rng.usize(4..=SLOT);
            self.post("local write", lane.local.write(self.src(), &message(tok, len)))?;
            lock(&self.book.messages).entry(tok).or_default().0 += 1;
            let r = if kind == 5 {
                lock(&lane.client).send(lane.local.slice(self.src()..self.src() + len)).flags(all).context(sid).post()
            } else {
                lock(&lane.client)
                    .send(lane.local.slice(self.src()..self.src() + len))
                    .imm(tok)
                    .flags(all)
                    .context(sid)
                    .post()
            };
            self.post("send", r)?;
            WcOpcode::Send
        };
        let wcs = self.wait(lane, &[sid, rid], true)?;
        self.check_wc(&wcs[0], sop)?;
        let rwc = wcs[1];
        if rwc.status() != WcStatus::Success {
            return Err(self.book.fail(format!("thread {}: receive failed: {rwc:?}", self.t)));
        }
        let delivered = match rwc.opcode() {
            WcOpcode::RecvRdmaWithImm => rwc.imm_data().ok_or_else(|| self.book.fail(format!("no imm: {rwc:?}")))?,
            WcOpcode::Recv => {
                let n = rwc.byte_len() as usize;
                if !(4..=SLOT).contains(&n) {
                    return Err(self.book.fail(format!("thread {}: bad message length: {rwc:?}", self.t)));
                }
                let m = lane.rbuf.to_vec(base, n).map_err(|e| self.book.fail(e.to_string()))?;
                let tok = u32::from_le_bytes([m[0], m[1], m[2], m[3]]);
                if m != message(tok, n) {
                    return Err(self.book.fail(format!("thread {}: message {tok:#x} arrived corrupted", self.t)));
                }
                if rwc.imm_data().is_some_and(|i| i != tok) {
                    return Err(self.book.fail(format!("thread {}: imm differs from the message: {rwc:?}", self.t)));
                }
                tok
            }
            _ => return Err(self.book.fail(format!("thread {}: unexpected receive opcode: {rwc:?}", self.t))),
        };
        let mut g = lock(&self.book.messages);
        let e = g.entry(delivered).or_default();
        e.1 += 1;
        if e.1 > e.0 {
            let msg = format!("message {delivered:#x} delivered more often than sent ({e:?})");
            drop(g);
            return Err(self.book.fail(msg));
        }
        Ok(())
    }
}

fn connect_lane<T: Transport>(
    ep: &Ep<T>,
    cpeer: &Peer<T>,
    speer: &Peer<T>,
    addr: &str,
    port: &str,
    cfg: &ConnCfg<T>,
    threads: usize,
) -> Lane<T> {
    let req = ConnReq::new(cpeer, addr, port, Some(cfg)).expect("conn_req_new");
    let client = req.connect(None).expect("connect");
    let server = ep.next_conn_req(Some(cfg)).expect("next_conn_req").connect(None).expect("accept");
    assert_eq!(client.next_event().expect("client event"), ConnEvent::Established);
    assert_eq!(server.next_event().expect("server event"), ConnEvent::Established);
    let target = mr(speer, threads * SLOT, Usage::READ_SRC | Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY);
    target.write(0, &vec![0; threads * SLOT]).expect("zero the target");
    let rtarget = remote(&target);
    let rbuf = mr(speer, threads * SLOT, Usage::RECV);
    let local = mr(cpeer, threads * 2 * SLOT, Usage::WRITE_SRC | Usage::READ_DST | Usage::SEND);
    Lane { client: Mutex::new(client), server: Mutex::new(server), target, rtarget, rbuf, local }
}

/// What a worker returns: its operation count and its model of every lane's slot.
type WorkerResult = Result<(u64, Vec<Vec<u8>>), String>;

/// `threads` threads share one client peer, one server peer and `conns` connections; each
/// posts mixed operations on connections picked at random.
fn stress__threads_share_peer_and_connections<B: Backend>(b: &B) {
    let k = knobs();
    let t = b.transport();
    let caps = b.caps();
    let (cpeer, speer) = (peer(b, &t), peer(b, &t));
    let (addr, port) = (b.addr(), b.port());
    let ep = Ep::listen(&speer, &addr, &port).expect("listen");
    // Each thread has at most one send-queue request and one receive outstanding per lane.
    let depth = u32::try_from(2 * k.threads + 4).expect("queue depth");
    let cfg = ConnCfg::new().with_sq_size(depth).with_rq_size(depth).with_cq_size(2 * depth);
    let lanes: Vec<Lane<B::T>> =
        (0..k.conns).map(|_| connect_lane(&ep, &cpeer, &speer, &addr, &port, &cfg, k.threads)).collect();

    // An overall bound on top of the per-wait one (slow emulated devices need minutes).
    let budget = k.soak.unwrap_or_default() + Duration::from_secs(600);
    let book = Book {
        shards: (0..k.threads).map(|_| Mutex::new(HashMap::new())).collect(),
        messages: Mutex::new(HashMap::new()),
        posted: AtomicU64::new(0),
        completed: AtomicU64::new(0),
        failed: AtomicBool::new(false),
        error: Mutex::new(None),
        deadline: Instant::now() + budget,
    };
    let started = Instant::now();
    let models: Vec<WorkerResult> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..k.threads)
            .map(|ti| {
                let (lanes, book, k) = (&lanes, &book, &k);
                let (native_atomic, native_flush) = (caps.native_atomic_write, caps.native_flush);
                s.spawn(move || {
                    let mut w = Worker {
                        t: ti,
                        lanes,
                        book,
                        rng: fastrand::Rng::with_seed(k.seed ^ (ti as u64).wrapping_mul(0x9E37_79B9)),
                        seq: 0,
                        model: vec![vec![0; SLOT]; lanes.len()],
                        native_atomic,
                        native_flush,
                    };
                    let mut n = 0u64;
                    loop {
                        let more = match k.soak {
                            Some(d) => started.elapsed() < d,
                            None => n < k.ops,
                        };
                        if !more {
                            break;
                        }
                        w.one()?;
                        n += 1;
                    }
                    Ok((n, w.model))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a worker panicked".to_owned()))).collect()
    });
    if let Some(e) = lock(&book.error).take() {
        panic!("stress failed: {e}");
    }
    let mut ops = 0;
    let mut by_thread = Vec::new();
    for m in models {
        let (n, model) = m.unwrap_or_else(|e| panic!("stress failed: {e}"));
        ops += n;
        by_thread.push(model);
    }

    // Every request completed exactly once and nothing is left over.
    for (i, sh) in book.shards.iter().enumerate() {
        let g = lock(sh);
        assert!(g.is_empty(), "thread {i}: {} work requests never completed", g.len());
    }
    let (posted, completed) = (book.posted.load(Ordering::SeqCst), book.completed.load(Ordering::SeqCst));
    assert_eq!(posted, completed, "posted vs completed");
    std::thread::sleep(Duration::from_millis(20));
    for lane in &lanes {
        for cq in [lock(&lane.client).cq(), lock(&lane.server).cq()] {
            let left = cq.next_wc().expect("poll");
            assert!(left.is_none(), "a completion nobody posted for: {left:?}");
        }
    }
    // Every message delivered exactly once.
    let msgs = lock(&book.messages);
    let sent: u64 = msgs.values().map(|v| u64::from(v.0)).sum();
    for (tok, (s, d)) in msgs.iter() {
        assert_eq!(s, d, "message {tok:#x}: sent {s}, delivered {d}");
    }
    // The regions hold exactly what the threads wrote.
    for (c, lane) in lanes.iter().enumerate() {
        let got = lane.target.to_vec(0, k.threads * SLOT).expect("target");
        for (ti, model) in by_thread.iter().enumerate() {
            assert!(
                got[ti * SLOT..(ti + 1) * SLOT] == model[c][..],
                "lane {c}, thread {ti}: region differs from the model"
            );
        }
    }
    eprintln!(
        "stress: {} threads x {} connections: {ops} operations, {posted} work requests, {completed} completions \
         (0 lost, 0 duplicated), {sent} messages delivered once, {:.2?}",
        k.threads,
        k.conns,
        started.elapsed()
    );
    // Clean teardown: each client disconnects; both sides see CLOSED. In librpma's order
    // (docs/semantics.md#connection-establishment): the server takes CLOSED and completes the
    // disconnect (on RDMA CM the client's DISCONNECTED waits for the server's DREP, sent by its
    // `rdma_disconnect`).
    for lane in &lanes {
        lock(&lane.client).disconnect().expect("disconnect");
        for conn in [&lane.server, &lane.client] {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let next = lock(conn).next_event();
                match next {
                    Ok(ev) => {
                        assert_eq!(ev, ConnEvent::Closed);
                        if std::ptr::eq(conn, &lane.server) {
                            lock(&lane.server).disconnect().expect("disconnect after CLOSED");
                        }
                        break;
                    }
                    Err(e) if e.kind() == ErrorKind::NoEvent => {
                        assert!(Instant::now() < deadline, "no CLOSED within 10 s");
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(e) => panic!("next_event: {e}"),
                }
            }
        }
    }
}
