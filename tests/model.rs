//! A connection as a state machine: proptest generates sequences of operations on a
//! connected pair (writes, reads, atomic writes, lying writes, sends, receives, polls of both
//! CQs, disconnects from either side, a cut link, deregistration of the target region, event
//! reads), runs them on the mock, and checks every outcome against a small reference model:
//! which calls fail and how, which completions each CQ yields (in order, with `wr_id`, status,
//! opcode and byte count; receives match any posted buffer, as receive order is unspecified),
//! send-queue accounting, completion-queue overrun, connection events, and the bytes of every
//! region after each step.
//!
//! `PROPTEST_CASES` sets the number of sequences (default 256).
#![allow(missing_docs)]

use std::collections::{BTreeSet, VecDeque};
use std::os::fd::{AsRawFd, BorrowedFd};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rpma::descriptor::MrDescriptor;
use rpma::mock::{Conn, ConnCfg, ConnReq, Device, Ep, MockFabric, Mode, MrLocal, Peer};
use rpma::{CompletionFlags, ConnEvent, ContextType, ErrorKind, MrRemote, Usage, WcOpcode, WcStatus};

const ADDR: &str = "127.0.0.1";
const PORT: &str = "7600";
/// Size of the target (server) and local (client) regions.
const SZ: usize = 256;
/// Receive buffers: slots of `RB` bytes, more slots than the receive queue holds.
const RB: usize = 64;
const SLOTS: usize = 12;
const QUEUE: usize = 10;
const EIO: i32 = 5;
const ENOMEM: i32 = 12;

#[derive(Clone, Debug)]
enum Op {
    /// Fill `[off, off+len)` of the local region with `fill`, then write it to the target.
    Write {
        off: usize,
        len: usize,
        fill: u8,
        signaled: bool,
    },
    /// Read `[off, off+len)` of the target into the same range of the local region.
    Read {
        off: usize,
        len: usize,
    },
    AtomicWrite {
        slot: usize,
        value: u8,
    },
    /// A write through a descriptor with a wrong rkey (the peer lied).
    WriteBadRkey,
    /// Send the first `len` bytes of the local region.
    Send {
        len: usize,
        signaled: bool,
    },
    /// `n` writes in a row, signaled or not as the bits of `mask` say (fills the send queue).
    Burst {
        n: usize,
        mask: u16,
    },
    /// The server posts a receive buffer of `RB` bytes.
    Recv,
    PollClient,
    PollServer,
    DisconnectClient,
    DisconnectServer,
    CutLink,
    DeregTarget,
    EventClient,
    EventServer,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..SZ + 40, 0..SZ / 2 + 20, any::<u8>(), any::<bool>())
            .prop_map(|(off, len, fill, signaled)| Op::Write { off, len, fill, signaled }),
        3 => (0..SZ + 40, 0..SZ / 2 + 20).prop_map(|(off, len)| Op::Read { off, len }),
        2 => (0..SZ / 8 + 3, any::<u8>()).prop_map(|(slot, value)| Op::AtomicWrite { slot, value }),
        1 => Just(Op::WriteBadRkey),
        4 => (prop_oneof![0..RB + 32, Just(RB), Just(RB + 1)], any::<bool>())
            .prop_map(|(len, signaled)| Op::Send { len, signaled }),
        2 => (1..=QUEUE + 2, any::<u16>()).prop_map(|(n, mask)| Op::Burst { n, mask }),
        4 => Just(Op::Recv),
        6 => Just(Op::PollClient),
        5 => Just(Op::PollServer),
        1 => Just(Op::DisconnectClient),
        1 => Just(Op::DisconnectServer),
        1 => Just(Op::CutLink),
        1 => Just(Op::DeregTarget),
        2 => Just(Op::EventClient),
        2 => Just(Op::EventServer),
    ]
}

// ---------------------------------------------------------------------------------------------
// The reference model
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Client,
    Server,
}

/// A completion the model expects.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Exp {
    /// On the client CQ (send queue): exact `wr_id`.
    Send { wr_id: u64, status: WcStatus, opcode: WcOpcode },
    /// On the server CQ: a receive of any buffer taken from the queue, with the bytes that
    /// landed (`Some` for a success).
    Recv { status: WcStatus, data: Option<Vec<u8>> },
}

/// A message waiting at the server for a receive buffer.
struct Msg {
    wr_id: u64,
    len: usize,
    signaled: bool,
}

struct Queue {
    entries: VecDeque<(Exp, u64)>,
    overrun: bool,
}

impl Queue {
    fn push(&mut self, e: Exp, retire: u64) {
        if self.entries.len() >= QUEUE {
            self.overrun = true;
        } else {
            self.entries.push_back((e, retire));
        }
    }
}

struct Model {
    target: Option<Vec<u8>>,
    local: Vec<u8>,
    error: [bool; 2],
    closed: [bool; 2],
    /// The side disconnected first and waits for the peer's answer to see CLOSED.
    disconnecting: [bool; 2],
    events: [VecDeque<ConnEvent>; 2],
    cq: [Queue; 2],
    posted: u64,
    retired: u64,
    /// Receive buffers in the server's queue. Which buffer a message takes is the mock's
    /// (random) choice, so the model counts them and learns the identity when polling.
    rq_len: usize,
    /// Receive buffers posted and not yet polled (`wr_id`s): queued or completed.
    outstanding: BTreeSet<u64>,
    pending: VecDeque<Msg>,
}

fn idx(s: Side) -> usize {
    s as usize
}

impl Model {
    fn new() -> Self {
        let q = || Queue { entries: VecDeque::new(), overrun: false };
        Self {
            target: Some(vec![0; SZ]),
            local: vec![0; SZ],
            error: [false; 2],
            closed: [false; 2],
            disconnecting: [false; 2],
            events: [VecDeque::new(), VecDeque::new()],
            cq: [q(), q()],
            posted: 0,
            retired: 0,
            rq_len: 0,
            outstanding: BTreeSet::new(),
            pending: VecDeque::new(),
        }
    }

    /// A send-queue completion of the client (failures are reported even when unsignaled and
    /// move the QP to the error state).
    fn complete(&mut self, wr_id: u64, status: WcStatus, opcode: WcOpcode, signaled: bool, seq: u64) {
        if status != WcStatus::Success {
            self.enter_error(Side::Client);
        }
        if status == WcStatus::Success && !signaled {
            return;
        }
        self.cq[0].push(Exp::Send { wr_id, status, opcode }, seq);
    }

    fn recv_complete(&mut self, status: WcStatus, data: Option<Vec<u8>>) {
        self.cq[1].push(Exp::Recv { status, data }, 0);
    }

    fn enter_error(&mut self, s: Side) {
        if std::mem::replace(&mut self.error[idx(s)], true) {
            return;
        }
        if s == Side::Server {
            for _ in 0..std::mem::take(&mut self.rq_len) {
                self.recv_complete(WcStatus::WrFlushErr, None);
            }
            for m in std::mem::take(&mut self.pending) {
                self.complete(m.wr_id, WcStatus::WrFlushErr, WcOpcode::Send, m.signaled, m.wr_id);
            }
        }
    }

    fn hang_up(&mut self, s: Side, ev: ConnEvent) {
        if !std::mem::replace(&mut self.closed[idx(s)], true) {
            self.enter_error(s);
            self.events[idx(s)].push_back(ev);
        }
    }

    /// `disconnect` on side `s` (RDMA CM's order): answering the peer's disconnect closes both
    /// sides; starting one puts this side in error and closes the peer, and this side's CLOSED
    /// waits for the peer's answer.
    fn disconnect(&mut self, s: Side) {
        let peer = match s {
            Side::Client => Side::Server,
            Side::Server => Side::Client,
        };
        if self.disconnecting[idx(peer)] {
            self.hang_up(s, ConnEvent::Closed);
            self.hang_up(peer, ConnEvent::Closed);
        } else if !self.closed[idx(s)] {
            self.disconnecting[idx(s)] = true;
            self.enter_error(s);
            self.hang_up(peer, ConnEvent::Closed);
        }
    }

    /// A message meets a receive buffer.
    fn deliver(&mut self, m: &Msg) {
        if m.len > RB {
            self.recv_complete(WcStatus::LocLenErr, None);
            self.enter_error(Side::Server);
            self.complete(m.wr_id, WcStatus::RemInvReqErr, WcOpcode::Send, m.signaled, m.wr_id);
            return;
        }
        let data = self.local[..m.len].to_vec();
        self.recv_complete(WcStatus::Success, Some(data));
        self.complete(m.wr_id, WcStatus::Success, WcOpcode::Send, m.signaled, m.wr_id);
    }

    /// `Err(errno)` if the send queue is full; otherwise the new sequence number (also used as
    /// the `wr_id`).
    fn take_slot(&mut self) -> Result<u64, i32> {
        if self.posted - self.retired >= QUEUE as u64 {
            return Err(ENOMEM);
        }
        self.posted += 1;
        Ok(self.posted)
    }
}

// ---------------------------------------------------------------------------------------------
// The system under test
// ---------------------------------------------------------------------------------------------

struct Sut {
    _fabric: MockFabric,
    client: Conn,
    server: Conn,
    target: Option<MrLocal>,
    rtarget: MrRemote,
    local: MrLocal,
    rbuf: MrLocal,
    free_slots: BTreeSet<u64>,
    _peers: (Peer, Peer, Ep),
}

fn nonblock(fd: BorrowedFd<'_>) {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let raw = fd.as_raw_fd();
    let fl = OFlag::from_bits_truncate(fcntl(raw, FcntlArg::F_GETFL).expect("F_GETFL"));
    fcntl(raw, FcntlArg::F_SETFL(fl | OFlag::O_NONBLOCK)).expect("F_SETFL");
}

fn setup() -> Sut {
    // The model is of the immediate mode (work executes inside post), whatever RPMA_MOCK_MODE says.
    let fabric = MockFabric::with_mode(Mode::Immediate);
    let caps = fabric.devices()[0].capabilities().clone();
    assert!(!caps.native_atomic_write && !caps.native_flush, "the model assumes emulated atomic write");
    let dev = Device::lookup(&fabric, ADDR, ContextType::Local).unwrap();
    let (speer, cpeer) = (Peer::new(&dev).unwrap(), Peer::new(&dev).unwrap());
    let q = QUEUE as u32;
    let cfg = ConnCfg::new().with_sq_size(q).with_rq_size(q).with_cq_size(q);
    let ep = Ep::listen(&speer, ADDR, PORT).unwrap();
    let client = ConnReq::new(&cpeer, ADDR, PORT, Some(&cfg)).unwrap().connect(None).unwrap();
    let server = ep.next_conn_req(Some(&cfg)).unwrap().connect(None).unwrap();
    assert_eq!(client.next_event().unwrap(), ConnEvent::Established);
    assert_eq!(server.next_event().unwrap(), ConnEvent::Established);
    nonblock(client.event_fd());
    nonblock(server.event_fd());
    let target = speer.alloc_mr(SZ, Usage::READ_SRC | Usage::WRITE_DST).unwrap();
    let rtarget = MrRemote::from_descriptor(&target.descriptor()).unwrap();
    let local = cpeer.alloc_mr(SZ, Usage::READ_DST | Usage::WRITE_SRC | Usage::SEND).unwrap();
    let rbuf = speer.alloc_mr(SLOTS * RB, Usage::RECV).unwrap();
    Sut {
        _fabric: fabric,
        client,
        server,
        target: Some(target),
        rtarget,
        local,
        rbuf,
        free_slots: (0..SLOTS as u64).map(|s| 1000 + s).collect(),
        _peers: (speer, cpeer, ep),
    }
}

fn flags(signaled: bool) -> CompletionFlags {
    if signaled {
        CompletionFlags::ALWAYS
    } else {
        CompletionFlags::ON_ERROR
    }
}

/// Checks a post's result against the model's prediction: `Ok`, `InvalidInput` (`None` errno), or a
/// provider error with an errno.
fn check_post(what: &str, got: rpma::Result<()>, want: Result<(), Option<i32>>) -> Result<(), TestCaseError> {
    match (&got, want) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(e), Err(None)) if e.kind() == ErrorKind::InvalidInput => Ok(()),
        (Err(e), Err(Some(errno))) if e.kind() == ErrorKind::Provider && e.errno() == Some(errno) => Ok(()),
        _ => Err(TestCaseError::fail(format!("{what}: mock gave {got:?}, model predicted {want:?}"))),
    }
}

fn in_range(off: usize, len: usize) -> bool {
    off.checked_add(len).is_some_and(|e| e <= SZ)
}

/// Runs one sequence on a fresh fabric, checking every step against the model.
fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let mut s = setup();
    let mut m = Model::new();
    for (step, op) in ops.iter().enumerate() {
        let ctx = |e: TestCaseError| TestCaseError::fail(format!("step {step} ({op:?}): {e}"));
        apply(&mut s, &mut m, op).map_err(ctx)?;
        // The bytes of every region agree with the model after every step.
        let local = s.local.to_vec(0, SZ).unwrap();
        prop_assert!(local == m.local, "step {step} ({op:?}): local region differs");
        if let (Some(t), Some(mt)) = (&s.target, &m.target) {
            prop_assert!(t.to_vec(0, SZ).unwrap() == *mt, "step {step} ({op:?}): target region differs");
        }
    }
    // Drain: everything the model still expects is there, and nothing more.
    for _ in 0..2 * QUEUE + 2 {
        apply(&mut s, &mut m, &Op::PollClient)?;
        apply(&mut s, &mut m, &Op::PollServer)?;
    }
    apply(&mut s, &mut m, &Op::EventClient)?;
    apply(&mut s, &mut m, &Op::EventServer)?;
    // Every buffer still posted is one the model knows is queued.
    if !m.cq[1].overrun {
        prop_assert_eq!(m.outstanding.len(), m.rq_len, "posted receive buffers vs queued");
    }
    Ok(())
}

#[allow(clippy::too_many_lines)]
fn apply(s: &mut Sut, m: &mut Model, op: &Op) -> Result<(), TestCaseError> {
    match *op {
        Op::Write { off, len, fill, signaled } => {
            if !in_range(off, len) {
                let r = s
                    .client
                    .write(s.rtarget.at(off), s.local.slice(off..off + len))
                    .flags(flags(signaled))
                    .context(1)
                    .post();
                return check_post("write", r, Err(None));
            }
            s.local.write(off, &vec![fill; len]).unwrap();
            m.local[off..off + len].fill(fill);
            let want = m.take_slot();
            let wr_id = m.posted;
            let r = s
                .client
                .write(s.rtarget.at(off), s.local.slice(off..off + len))
                .flags(flags(signaled))
                .context(wr_id)
                .post();
            check_post("write", r, want.map(|_| ()).map_err(Some))?;
            if let Ok(seq) = want {
                if m.error[0] || m.closed[0] {
                    m.complete(wr_id, WcStatus::WrFlushErr, WcOpcode::RdmaWrite, signaled, seq);
                } else if let Some(t) = &mut m.target {
                    t[off..off + len].copy_from_slice(&m.local[off..off + len]);
                    m.complete(wr_id, WcStatus::Success, WcOpcode::RdmaWrite, signaled, seq);
                } else {
                    m.complete(wr_id, WcStatus::RemAccessErr, WcOpcode::RdmaWrite, signaled, seq);
                }
            }
        }
        Op::Burst { n, mask } => {
            for i in 0..n {
                let (off, len, fill) = (i * 8, 8, (mask >> 8) as u8 ^ i as u8);
                apply(s, m, &Op::Write { off, len, fill, signaled: mask & (1 << i) != 0 })?;
            }
        }
        Op::Read { off, len } => {
            if !in_range(off, len) {
                let r = s.client.read(s.local.slice(off..off + len), s.rtarget.at(off)).context(1).post();
                return check_post("read", r, Err(None));
            }
            let want = m.take_slot();
            let wr_id = m.posted;
            let r = s.client.read(s.local.slice(off..off + len), s.rtarget.at(off)).context(wr_id).post();
            check_post("read", r, want.map(|_| ()).map_err(Some))?;
            if let Ok(seq) = want {
                if m.error[0] || m.closed[0] {
                    m.complete(wr_id, WcStatus::WrFlushErr, WcOpcode::RdmaRead, true, seq);
                } else if let Some(t) = &m.target {
                    m.local[off..off + len].copy_from_slice(&t[off..off + len]);
                    m.complete(wr_id, WcStatus::Success, WcOpcode::RdmaRead, true, seq);
                } else {
                    m.complete(wr_id, WcStatus::RemAccessErr, WcOpcode::RdmaRead, true, seq);
                }
            }
        }
        Op::AtomicWrite { slot, value } => {
            let off = slot * 8;
            let bytes = [value; 8];
            if off + 8 > SZ {
                let r = s.client.atomic_write(s.rtarget.at(off), bytes).context(1).post();
                return check_post("atomic_write", r, Err(None));
            }
            let want = m.take_slot();
            let wr_id = m.posted;
            let r = s.client.atomic_write(s.rtarget.at(off), bytes).context(wr_id).post();
            check_post("atomic_write", r, want.map(|_| ()).map_err(Some))?;
            if let Ok(seq) = want {
                if m.error[0] || m.closed[0] {
                    m.complete(wr_id, WcStatus::WrFlushErr, WcOpcode::RdmaWrite, true, seq);
                } else if let Some(t) = &mut m.target {
                    t[off..off + 8].copy_from_slice(&bytes);
                    m.complete(wr_id, WcStatus::Success, WcOpcode::RdmaWrite, true, seq);
                } else {
                    m.complete(wr_id, WcStatus::RemAccessErr, WcOpcode::RdmaWrite, true, seq);
                }
            }
        }
        Op::WriteBadRkey => {
            let d = MrDescriptor::decode(&s.rtarget.descriptor().encode()).unwrap();
            let bad = MrRemote::from_descriptor(&MrDescriptor { rkey: d.rkey ^ 0x4000_0000, ..d }.encode()).unwrap();
            let want = m.take_slot();
            let wr_id = m.posted;
            let r =
                s.client.write(bad.at(0), s.local.slice(0..16)).flags(CompletionFlags::ON_ERROR).context(wr_id).post();
            check_post("lying write", r, want.map(|_| ()).map_err(Some))?;
            if let Ok(seq) = want {
                let status = if m.error[0] || m.closed[0] { WcStatus::WrFlushErr } else { WcStatus::RemAccessErr };
                m.complete(wr_id, status, WcOpcode::RdmaWrite, false, seq);
            }
        }
        Op::Send { len, signaled } => {
            let want = m.take_slot();
            let wr_id = m.posted;
            let r = s.client.send(s.local.slice(0..len)).flags(flags(signaled)).context(wr_id).post();
            check_post("send", r, want.map(|_| ()).map_err(Some))?;
            if let Ok(seq) = want {
                if m.error[0] || m.closed[0] {
                    m.complete(wr_id, WcStatus::WrFlushErr, WcOpcode::Send, signaled, seq);
                } else if m.error[1] {
                    m.complete(wr_id, WcStatus::RetryExcErr, WcOpcode::Send, signaled, seq);
                } else {
                    let msg = Msg { wr_id, len, signaled };
                    // The mock picks any queued buffer; which one is only known when polled.
                    if m.rq_len > 0 {
                        m.rq_len -= 1;
                        m.deliver(&msg);
                    } else {
                        m.pending.push_back(msg);
                    }
                }
            }
        }
        Op::Recv => {
            let Some(slot) = s.free_slots.pop_first() else { return Ok(()) };
            let off = (slot - 1000) as usize * RB;
            let r = s.server.recv(s.rbuf.slice(off..off + RB)).context(slot).post();
            let want = if m.error[1] {
                m.recv_complete(WcStatus::WrFlushErr, None);
                Ok(())
            } else if let Some(msg) = m.pending.pop_front() {
                m.deliver(&msg);
                Ok(())
            } else if m.rq_len >= QUEUE {
                Err(Some(ENOMEM))
            } else {
                m.rq_len += 1;
                Ok(())
            };
            if want.is_err() {
                s.free_slots.insert(slot);
            } else {
                m.outstanding.insert(slot);
            }
            check_post("recv", r, want)?;
        }
        Op::PollClient | Op::PollServer => {
            let (side, conn) = if matches!(op, Op::PollClient) { (0, &s.client) } else { (1, &s.server) };
            let got = conn.cq().next_wc();
            if m.cq[side].overrun {
                let e = got.err().ok_or_else(|| TestCaseError::fail("poll of an overrun CQ succeeded"))?;
                prop_assert_eq!((e.kind(), e.errno()), (ErrorKind::Provider, Some(EIO)));
                return Ok(());
            }
            let Some((exp, retire)) = m.cq[side].entries.pop_front() else {
                match got {
                    Ok(None) => {}
                    Ok(Some(wc)) => {
                        return Err(TestCaseError::fail(format!("a completion the model did not expect: {wc:?}")))
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("poll of an empty CQ failed: {e}"))),
                }
                return Ok(());
            };
            let wc = got
                .map_err(|e| TestCaseError::fail(format!("expected {exp:?}, got {e}")))?
                .ok_or_else(|| TestCaseError::fail(format!("expected {exp:?}, the CQ is empty")))?;
            if side == 0 && retire > m.retired {
                m.retired = retire;
            }
            match exp {
                Exp::Send { wr_id, status, opcode } => {
                    prop_assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (wr_id, status, opcode), "{:?}", wc);
                }
                Exp::Recv { status, data } => {
                    prop_assert!(
                        m.outstanding.remove(&wc.wr_id()),
                        "receive completion of a buffer not posted: {:?}",
                        wc
                    );
                    prop_assert_eq!((wc.status(), wc.opcode()), (status, WcOpcode::Recv), "{:?}", wc);
                    if let Some(d) = data {
                        prop_assert_eq!(wc.byte_len() as usize, d.len());
                        let off = (wc.wr_id() - 1000) as usize * RB;
                        prop_assert!(s.rbuf.to_vec(off, d.len()).unwrap() == d, "message content differs");
                    }
                    s.free_slots.insert(wc.wr_id());
                }
            }
        }
        Op::DisconnectClient => {
            s.client.disconnect().map_err(|e| TestCaseError::fail(e.to_string()))?;
            m.disconnect(Side::Client);
        }
        Op::DisconnectServer => {
            s.server.disconnect().map_err(|e| TestCaseError::fail(e.to_string()))?;
            m.disconnect(Side::Server);
        }
        Op::CutLink => {
            s.client.backend().cut_link();
            m.hang_up(Side::Client, ConnEvent::Lost);
            m.hang_up(Side::Server, ConnEvent::Lost);
        }
        Op::DeregTarget => {
            if let Some(t) = s.target.take() {
                t.dereg().map_err(|e| TestCaseError::fail(e.to_string()))?;
                m.target = None;
            }
        }
        Op::EventClient | Op::EventServer => {
            let (side, conn) = if matches!(op, Op::EventClient) { (0, &s.client) } else { (1, &s.server) };
            let got = conn.next_event();
            match m.events[side].pop_front() {
                Some(ev) => prop_assert_eq!(got.map_err(|e| TestCaseError::fail(e.to_string()))?, ev),
                None => prop_assert_eq!(
                    got.map_err(|e| e.kind()),
                    Err(ErrorKind::NoEvent),
                    "an event the model did not expect"
                ),
            }
        }
    }
    Ok(())
}

#[test]
fn connection_state_machine_matches_model() {
    let mut runner = TestRunner::new(Config::default());
    let cases = runner.config().cases;
    let strategy = proptest::collection::vec(op(), 1..120);
    runner.run(&strategy, |ops| run(&ops)).unwrap();
    eprintln!("model: {cases} operation sequences checked");
}
