//! A property test of the writer and replicas against a reference: random appends, syncs,
//! truncations, power cuts and reboots of replicas, reconnects and writer failovers on three
//! replicas with a majority quorum. The reference is the list of entries appended and the
//! position the last successful sync (or recovery) acknowledged; the log must never lose an
//! acknowledged entry, never show an entry other than the one appended at its lsn, and go on
//! (sync, recover) whenever a majority of replicas is alive.

mod common;

use std::time::Duration;

use common::{addrs, builder, payload, start, writer_peer, LOG_ID};
use proptest::prelude::*;
use rpma::mock::{Device, MockFabric, PersistentMemory, Unflushed};
use rpma::{ContextType, Memory};
use rpma_log::{Health, Log, LogError, LogOptions, Quorum, ReplicaHandle};

const N: usize = 3;
const LEN: usize = rpma_log::HEADER_SIZE + 2048;

#[derive(Clone, Debug)]
enum Op {
    Append(usize),
    Sync,
    Truncate,
    Cut(usize),
    Reboot(usize),
    Reconnect(usize),
    Failover,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0usize..150).prop_map(Op::Append),
        3 => Just(Op::Sync),
        1 => Just(Op::Truncate),
        1 => (0..N).prop_map(Op::Cut),
        1 => (0..N).prop_map(Op::Reboot),
        1 => (0..N).prop_map(Op::Reconnect),
        1 => Just(Op::Failover),
    ]
}

/// The entry appended as the `k`-th append of the run (its bytes name the append, so that an
/// entry shown at the wrong lsn, or a lost one's successor, is told apart).
fn bytes(k: usize, len: usize) -> Vec<u8> {
    let mut v = payload(k as u64);
    v.resize(len.max(8), 0xA5);
    v[..8].copy_from_slice(&(k as u64).to_le_bytes());
    v
}

enum Node {
    Alive(ReplicaHandle),
    Dead(Memory),
}

struct World {
    fabric: MockFabric,
    nodes: Vec<Node>,
    log: Option<Log<MockFabric>>,
    /// Whether the writer's connection to each replica is still good (made since its last cut).
    linked: [bool; N],
    /// The reference history: entry bytes by lsn (from the first lsn held).
    history: Vec<Vec<u8>>,
    acked: u64,
    appends: usize,
}

fn opts() -> LogOptions {
    LogOptions::new(LOG_ID).quorum(Quorum::Majority).timeout(Duration::from_secs(2))
}

impl World {
    fn alive(&self) -> usize {
        self.nodes.iter().filter(|n| matches!(n, Node::Alive(_))).count()
    }

    fn check_log(&self) -> Result<(), TestCaseError> {
        let Some(log) = &self.log else { return Ok(()) };
        for lsn in log.head_lsn()..log.next_lsn() {
            prop_assert_eq!(
                log.read(lsn).map_err(|e| TestCaseError::fail(e.to_string()))?,
                self.history[lsn as usize].clone()
            );
        }
        Ok(())
    }

    fn failover(&mut self) -> Result<(), TestCaseError> {
        self.log = None;
        match Log::open(&writer_peer(&self.fabric), &addrs(N), opts()) {
            Ok((log, report)) => {
                prop_assert!(self.alive() >= 2, "opened with {} replicas alive", self.alive());
                prop_assert!(report.rejected.is_empty(), "{:?}", report.rejected);
                prop_assert!(
                    report.next_lsn >= self.acked,
                    "{} acknowledged, {} recovered",
                    self.acked,
                    report.next_lsn
                );
                prop_assert!(report.next_lsn as usize <= self.history.len(), "recovered lsns never appended");
                self.history.truncate(report.next_lsn as usize);
                for i in 0..N {
                    self.linked[i] = log.health()[i] == Health::Up;
                }
                self.acked = report.next_lsn;
                self.log = Some(log);
                self.check_log()
            }
            Err(LogError::NoQuorum { .. }) => {
                prop_assert!(self.alive() < 2, "open failed with {} replicas alive", self.alive());
                Ok(())
            }
            Err(e) => Err(TestCaseError::fail(format!("open: {e}"))),
        }
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Append(len) => {
                let Some(log) = self.log.as_mut() else { return Ok(()) };
                let b = bytes(self.appends, len);
                self.appends += 1;
                match log.append(&b) {
                    Ok(lsn) => {
                        prop_assert_eq!(lsn as usize, self.history.len());
                        self.history.push(b);
                    }
                    Err(LogError::Full { .. }) => {}
                    Err(e) => return Err(TestCaseError::fail(format!("append: {e}"))),
                }
            }
            Op::Sync => {
                let Some(log) = self.log.as_mut() else { return Ok(()) };
                let healthy = (0..N).filter(|&i| self.linked[i]).count();
                match log.sync_all() {
                    Ok(d) => {
                        prop_assert_eq!(d as usize, self.history.len());
                        self.acked = d;
                    }
                    Err(LogError::NoQuorum { .. }) => {
                        prop_assert!(healthy < 2, "sync failed with {} healthy replicas", healthy)
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("sync: {e}"))),
                }
            }
            Op::Truncate => {
                let Some(log) = self.log.as_mut() else { return Ok(()) };
                let to = log.durable_lsn();
                match log.truncate_prefix(to) {
                    Ok(()) | Err(LogError::NoQuorum { .. }) => {}
                    Err(e) => return Err(TestCaseError::fail(format!("truncate: {e}"))),
                }
            }
            Op::Cut(i) => {
                if let Node::Alive(_) = self.nodes[i] {
                    self.linked[i] = false;
                    let dev = Device::lookup(&self.fabric, &common::replica_ip(i), ContextType::Local).unwrap();
                    let cut = self.fabric.power_cut(dev.backend()).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    let memory = cut.into_regions().pop().expect("the region").into_memory();
                    if let Node::Alive(h) = std::mem::replace(&mut self.nodes[i], Node::Dead(memory)) {
                        h.kill();
                    }
                }
            }
            Op::Reboot(i) => {
                if let Node::Dead(_) = self.nodes[i] {
                    let Node::Dead(memory) =
                        std::mem::replace(&mut self.nodes[i], Node::Dead(Memory::from_vec(vec![0])))
                    else {
                        unreachable!()
                    };
                    let h =
                        start(&self.fabric, i, Some(memory), LEN).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    self.nodes[i] = Node::Alive(h);
                }
            }
            Op::Reconnect(i) => {
                let alive = matches!(self.nodes[i], Node::Alive(_));
                let Some(log) = self.log.as_mut() else { return Ok(()) };
                // A replica the writer has not seen fail yet is left as it is.
                let connected = log.health()[i] != Health::Down;
                match log.reconnect(i) {
                    Ok(()) => {
                        prop_assert!(alive || connected, "reconnected to a dead replica");
                        if !connected {
                            self.linked[i] = true;
                        }
                    }
                    Err(LogError::NoQuorum { .. }) => {}
                    Err(e) => return Err(TestCaseError::fail(format!("reconnect: {e}"))),
                }
            }
            Op::Failover => self.failover()?,
        }
        self.check_log()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn model_writer_and_replicas_against_the_reference(ops in proptest::collection::vec(op(), 1..40)) {
        let fabric = builder(N).persistent_memory(PersistentMemory::All).unflushed(Unflushed::Lost).build();
        let nodes = (0..N).map(|i| Node::Alive(start(&fabric, i, None, LEN).unwrap())).collect();
        let mut w = World { fabric, nodes, log: None, linked: [false; N], history: Vec::new(), acked: 0, appends: 0 };
        w.failover()?;
        for op in &ops {
            w.step(op)?;
        }
        // Every replica back, and a last writer: it recovers everything acknowledged.
        for i in 0..N {
            w.step(&Op::Reboot(i))?;
        }
        w.failover()?;
        prop_assert!(w.log.is_some(), "no writer could open with every replica alive");
    }
}
