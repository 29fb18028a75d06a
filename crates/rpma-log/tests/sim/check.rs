//! What the simulation checks: the history the actors report (appends, acknowledgements,
//! truncations, recoveries) against the log's promises.

use std::collections::{BTreeMap, HashMap};

use rpma::mock::MockFabric;
use rpma_log::{Log, Lsn, RecoveryReport};

/// The history of one run, shared by the actors (locked only between scheduling points).
#[derive(Default)]
pub struct Checker {
    /// Every payload appended at each lsn, by any writer.
    appended: HashMap<Lsn, Vec<Vec<u8>>>,
    /// The entry acknowledged at each lsn (a `sync` returned a position above it), with the
    /// number of the acknowledgement.
    acked: BTreeMap<Lsn, (Vec<u8>, u64)>,
    /// Acknowledgements so far.
    acks: u64,
    /// The highest lsn any writer asked to truncate below (whether its call succeeded or not).
    truncated: Lsn,
    /// Successful recoveries checked.
    pub recoveries: u64,
    /// Syncs that returned.
    pub syncs: u64,
    /// What broke the promise, in order.
    pub violations: Vec<String>,
}

impl Checker {
    /// Writer `w` appended `data` at `lsn`.
    pub fn appended(&mut self, lsn: Lsn, data: &[u8]) {
        self.appended.entry(lsn).or_default().push(data.to_vec());
    }

    /// Writer `w` asked to truncate the entries below `lsn`.
    pub fn truncating(&mut self, lsn: Lsn) {
        self.truncated = self.truncated.max(lsn);
    }

    /// The acknowledged entries.
    pub fn acknowledged(&self) -> usize {
        self.acked.len()
    }

    /// Writer `w`'s `sync` returned `durable`: every entry of its log below it is acknowledged
    /// (`from` is the first it had not reported yet). Never two different entries at one lsn.
    pub fn synced(&mut self, w: &str, log: &Log<MockFabric>, from: Lsn, durable: Lsn) {
        self.syncs += 1;
        for lsn in from.max(log.head_lsn())..durable {
            let Ok(data) = log.read(lsn) else {
                self.violations.push(format!("{w}: its sync acknowledged lsn {lsn}, which it cannot read"));
                continue;
            };
            match self.acked.get(&lsn).map(|(d, _)| d) {
                Some(old) if *old != data => self.violations.push(format!(
                    "{w}: acknowledged lsn {lsn} = {}, another entry {} was acknowledged at it before",
                    show(&data),
                    show(old)
                )),
                Some(_) => {}
                None => {
                    self.acks += 1;
                    self.acked.insert(lsn, (data, self.acks));
                }
            }
        }
    }

    /// Where a recovery that begins now stands: it must hold the entries acknowledged so far.
    pub fn before_open(&self) -> u64 {
        self.acks
    }

    /// Writer `w` recovered `log` (`report`) in an open that began at `began`
    /// ([`Checker::before_open`]): every entry acknowledged before it began (a `sync` that
    /// returned then) and not truncated is there with its bytes (one acknowledged while it ran
    /// may be or not: the two overlap), it starts no later than a truncation asked for, and it
    /// holds only entries appended at their lsns.
    pub fn recovered(&mut self, w: &str, log: &Log<MockFabric>, report: &RecoveryReport, began: u64) {
        self.recoveries += 1;
        let (head, next) = (report.head_lsn, report.next_lsn);
        if head > self.truncated {
            self.violations
                .push(format!("{w}: recovery starts at lsn {head}, no writer truncated beyond {}", self.truncated));
        }
        for (&lsn, (data, _)) in self.acked.range(head..).filter(|(_, (_, n))| *n <= began) {
            if lsn >= next {
                self.violations.push(format!(
                    "{w}: acknowledged lsn {lsn} ({}) lost: the recovery holds {head}..{next} ({report:?})",
                    show(data)
                ));
                break;
            }
            match log.read(lsn) {
                Ok(d) if d == *data => {}
                Ok(d) => self.violations.push(format!(
                    "{w}: acknowledged lsn {lsn} was {}, the recovery holds {}",
                    show(data),
                    show(&d)
                )),
                Err(e) => self.violations.push(format!("{w}: acknowledged lsn {lsn} unreadable after recovery: {e}")),
            }
        }
        for lsn in head..next {
            let Ok(d) = log.read(lsn) else { continue };
            if !self.appended.get(&lsn).is_some_and(|v| v.contains(&d)) {
                self.violations
                    .push(format!("{w}: the recovery holds {} at lsn {lsn}, never appended there", show(&d)));
            }
        }
    }
}

/// An entry as the reports show it: its tag (the payloads start with `w<writer>#<n>`).
pub fn show(data: &[u8]) -> String {
    let tag: Vec<u8> = data.iter().copied().take_while(|&b| b != b'|').take(24).collect();
    String::from_utf8_lossy(&tag).into_owned()
}
