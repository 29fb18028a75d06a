//! Message matching: posted receive buffers, the messages waiting for one, and delivery.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use rpma_core::{Error, Result, WcOpcode, WcStatus};

use super::pieces::{Dst, Source};
use super::wire::Link;
use super::{lock, QpShared, CONNECTED, ENOMEM};

/// A posted receive buffer (it keeps its registrations alive while posted).
pub(super) struct RecvBuf {
    pub(super) dst: Dst,
    pub(super) wr_id: u64,
}

/// Who sent a message: a queue pair of this process, or one in another process, answered
/// through its connection.
pub(crate) enum Sender {
    Local(Weak<QpShared>),
    Wire(Weak<Link>),
}

/// A message on its way to a receive buffer: a send, or the receive-consuming part of a write
/// with immediate data.
pub(crate) struct Msg {
    pub(super) src: Source,
    pub(super) len: usize,
    pub(super) imm: Option<u32>,
    pub(super) write_imm: bool,
    pub(super) sender: Sender,
    pub(super) sender_signaled: bool,
    pub(super) sender_wr_id: u64,
    pub(super) sender_seq: u64,
    pub(super) receiver: Weak<QpShared>,
}

/// A set of posted receive buffers plus the messages waiting for one.
pub(super) struct RecvSide {
    pub(super) bufs: Vec<RecvBuf>,
    pub(super) pending: VecDeque<Msg>,
    cap: usize,
    rng: fastrand::Rng,
    ordered: bool,
}

impl RecvSide {
    pub(super) fn new(cap: u32, seed: u64, ordered: bool) -> Self {
        Self {
            bufs: Vec::with_capacity(cap as usize),
            pending: VecDeque::new(),
            cap: cap as usize,
            rng: fastrand::Rng::with_seed(seed),
            ordered,
        }
    }

    fn take_buf(&mut self) -> Option<RecvBuf> {
        if self.bufs.is_empty() {
            return None;
        }
        if self.ordered {
            Some(self.bufs.remove(0))
        } else {
            let i = self.rng.usize(..self.bufs.len());
            Some(self.bufs.swap_remove(i))
        }
    }

    /// Whether `n` more buffers fit (messages waiting for a buffer are not counted: a chain of
    /// receives is posted whole or not at all).
    pub(super) fn has_room(&self, n: usize) -> bool {
        self.bufs.len() + n <= self.cap
    }

    /// Posts a buffer; returns a message that was waiting for it, if any.
    pub(super) fn post(&mut self, buf: RecvBuf, op: &'static str) -> Result<Option<(Msg, RecvBuf)>> {
        if let Some(m) = self.pending.pop_front() {
            return Ok(Some((m, buf)));
        }
        if self.bufs.len() >= self.cap {
            return Err(Error::provider(op, ENOMEM).with_detail("receive queue is full"));
        }
        self.bufs.push(buf);
        Ok(None)
    }
}

/// Completes the sender of a message that was delivered or failed.
pub(super) fn complete_sender(m: &Msg, status: WcStatus) {
    match &m.sender {
        Sender::Local(w) => {
            if let Some(s) = w.upgrade() {
                let op = if m.write_imm { WcOpcode::RdmaWrite } else { WcOpcode::Send };
                s.complete(m.sender_wr_id, status, op, m.sender_signaled, m.sender_seq);
                if s.deferred.is_some() && (m.sender_signaled || status != WcStatus::Success) {
                    s.fabric.event(crate::event::Event::Complete);
                }
                s.message_done(m.sender_seq);
            }
        }
        Sender::Wire(w) => {
            if let Some(l) = w.upgrade() {
                l.message_done(m.sender_seq, status);
            }
        }
    }
}

/// Puts a message into a receive buffer and completes both sides.
/// Takes both by value: the regions they hold are released before the completions are posted,
/// so a region is free again (`MrLocal::as_mut_slice`) as soon as its completion can be polled.
pub(super) fn deliver(mut m: Msg, mut b: RecvBuf) {
    let Some(receiver) = m.receiver.upgrade() else {
        complete_sender(&m, WcStatus::RetryExcErr);
        return;
    };
    let rop = if m.write_imm { WcOpcode::RecvRdmaWithImm } else { WcOpcode::Recv };
    if !m.write_imm && m.len > b.dst.len() {
        drop(std::mem::take(&mut b.dst));
        drop(std::mem::take(&mut m.src));
        receiver.recv_complete(b.wr_id, WcStatus::LocLenErr, rop, 0, None);
        receiver.to_error();
        complete_sender(&m, WcStatus::RemInvReqErr);
        return;
    }
    b.dst.fill(&m.src, m.len);
    drop(std::mem::take(&mut b.dst));
    drop(std::mem::take(&mut m.src));
    // A sender in another process is answered first: once the receive's completion can be
    // polled, the receiver may disconnect, and its disconnect must not overtake the answer.
    let wire = matches!(m.sender, Sender::Wire(_));
    if wire {
        complete_sender(&m, WcStatus::Success);
    }
    receiver.recv_complete(b.wr_id, WcStatus::Success, rop, m.len as u32, m.imm);
    if !wire {
        complete_sender(&m, WcStatus::Success);
    }
}

/// A message arrives at `receiver`: it takes a posted buffer (at random unless ordered) or
/// waits for one (RC receiver-not-ready retry, infinite as librpma configures it). Returns
/// whether it is settled (delivered or failed); `false`: it waits for a receive.
pub(super) fn arrive(receiver: &Arc<QpShared>, m: Msg) -> bool {
    if receiver.state() != CONNECTED {
        complete_sender(&m, WcStatus::RetryExcErr);
        return true;
    }
    let buf = {
        let mut g = lock(receiver.side());
        match g.take_buf() {
            Some(b) => b,
            None => {
                g.pending.push_back(m);
                return false;
            }
        }
    };
    deliver(m, buf);
    true
}
