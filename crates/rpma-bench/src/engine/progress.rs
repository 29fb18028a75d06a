//! The progress bar of a run (on stderr, when it is a terminal).
//!
//! The coordinator marks each run's start (its warm-up) and the start of its measurement once
//! every client thread has reached them, so the bar names the run that is going on (not the next
//! one, whose start the coordinator waits for while the current one runs) and counts from the
//! run's real start.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::op::Op;
use crate::plan::{Amount, Plan};

/// How long an `--iters` run goes without a bar (a short run would only flash one).
pub(super) const ITERS_BAR_DELAY: Duration = Duration::from_millis(200);

/// One run's progress.
#[derive(Default)]
pub(super) struct RunProgress {
    /// Operations completed (warm-up and measurement, all threads).
    pub(super) done: AtomicU64,
    /// When every thread had started the run (its warm-up).
    pub(super) started: OnceLock<Instant>,
    /// When every thread had started its measurement.
    pub(super) measuring: OnceLock<Instant>,
}

/// Shared progress of the runs.
pub(super) struct Progress {
    pub(super) runs: Vec<RunProgress>,
    /// The run going on (`usize::MAX` before the first).
    pub(super) current: AtomicUsize,
    pub(super) finished: AtomicBool,
}

/// What the bar shows at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct View {
    pub(super) run: usize,
    pub(super) label: String,
    pub(super) len: u64,
    pub(super) pos: u64,
    /// Since the run started.
    pub(super) elapsed: Duration,
}

impl Progress {
    pub(super) fn new(runs: usize) -> Self {
        Self {
            runs: (0..runs).map(|_| RunProgress::default()).collect(),
            current: AtomicUsize::new(usize::MAX),
            finished: AtomicBool::new(false),
        }
    }

    /// Run `i` has started on every thread (called after the barrier that starts it).
    pub(super) fn begin(&self, i: usize, now: Instant) {
        if let Some(r) = self.runs.get(i) {
            let _ = r.started.set(now);
        }
        self.current.store(i, Ordering::Release);
    }

    /// Run `i`'s measurement has started on every thread.
    pub(super) fn measure(&self, i: usize, now: Instant) {
        if let Some(r) = self.runs.get(i) {
            let _ = r.measuring.set(now);
        }
    }

    /// What the bar shows at `now`, if a run is going on and is due a bar.
    pub(super) fn view(&self, plan: &Plan, runs: &[(Op, usize)], now: Instant) -> Option<View> {
        let run = self.current.load(Ordering::Acquire);
        let (&(op, size), state) = (runs.get(run)?, self.runs.get(run)?);
        let started = *state.started.get()?;
        let elapsed = now.saturating_duration_since(started);
        let (len, pos) = match plan.amount {
            Amount::Iters(n) => {
                if elapsed < ITERS_BAR_DELAY {
                    return None;
                }
                ((n + plan.warmup) * plan.conns as u64, state.done.load(Ordering::Relaxed))
            }
            Amount::Duration(d) => {
                let measured = state.measuring.get().map_or(Duration::ZERO, |m| now.saturating_duration_since(*m));
                (d.as_millis() as u64, measured.min(d).as_millis() as u64)
            }
        };
        Some(View { run, label: format!("{} {size} B", op.name()), len, pos, elapsed })
    }
}

/// Whether a progress bar is drawn (asked for, and standard error is a terminal).
pub(super) fn shown(plan: &Plan) -> bool {
    plan.progress && std::io::stderr().is_terminal()
}

pub(super) fn show_progress(plan: &Plan, runs: &[(Op, usize)], progress: &Progress) {
    if !shown(plan) {
        return;
    }
    let mut bar: Option<(usize, ProgressBar)> = None;
    while !progress.finished.load(Ordering::Acquire) {
        match progress.view(plan, runs, Instant::now()) {
            Some(v) => {
                if bar.as_ref().is_some_and(|(run, _)| *run != v.run) {
                    if let Some((_, b)) = bar.take() {
                        b.finish_and_clear();
                    }
                }
                let (_, b) = bar.get_or_insert_with(|| {
                    let style = ProgressStyle::with_template("{msg} [{bar:40}] {percent}% {elapsed}")
                        .unwrap_or_else(|_| ProgressStyle::default_bar());
                    let b = ProgressBar::new(v.len)
                        .with_style(style.progress_chars("=> "))
                        .with_message(v.label.clone())
                        .with_elapsed(v.elapsed);
                    (v.run, b)
                });
                b.set_position(v.pos);
            }
            None => {
                if let Some((_, b)) = bar.take() {
                    b.finish_and_clear();
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if let Some((_, b)) = bar {
        b.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::parse;
    use crate::plan::plan;

    fn plan_of(line: &[&str]) -> Plan {
        plan(&parse(line).unwrap()).unwrap()
    }

    #[test]
    fn the_bar_names_the_run_going_on_and_counts_from_its_start() {
        let p = plan_of(&["--size", "8,64", "--duration", "2"]);
        let runs = [(Op::Write, 8), (Op::Write, 64)];
        let progress = Progress::new(runs.len());
        let t0 = Instant::now();
        assert_eq!(progress.view(&p, &runs, t0), None, "no run yet");
        progress.begin(0, t0);
        // A duration run shows its bar at once, counting from the run's start.
        let v = progress.view(&p, &runs, t0).unwrap();
        assert_eq!((v.run, v.label.as_str(), v.len, v.pos, v.elapsed), (0, "write 8 B", 2000, 0, Duration::ZERO));
        progress.measure(0, t0 + Duration::from_millis(100));
        let v = progress.view(&p, &runs, t0 + Duration::from_millis(1100)).unwrap();
        assert_eq!((v.label.as_str(), v.pos, v.elapsed), ("write 8 B", 1000, Duration::from_millis(1100)));
        // Run 0 still goes on while the coordinator waits to start run 1: still its label.
        let v = progress.view(&p, &runs, t0 + Duration::from_millis(2050)).unwrap();
        assert_eq!((v.label.as_str(), v.pos), ("write 8 B", 1950));
        progress.begin(1, t0 + Duration::from_millis(2200));
        let v = progress.view(&p, &runs, t0 + Duration::from_millis(2200)).unwrap();
        assert_eq!((v.run, v.label.as_str(), v.pos), (1, "write 64 B", 0));
    }

    #[test]
    fn an_iters_run_shows_its_bar_after_a_short_delay_with_its_true_elapsed_time() {
        let p = plan_of(&["--iters", "1000", "--warmup", "0", "--conns", "2", "--threads", "2"]);
        let runs = [(Op::Read, 4096)];
        let progress = Progress::new(1);
        let t0 = Instant::now();
        progress.begin(0, t0);
        assert_eq!(progress.view(&p, &runs, t0 + ITERS_BAR_DELAY / 2), None);
        progress.runs[0].done.store(500, Ordering::Relaxed);
        let v = progress.view(&p, &runs, t0 + ITERS_BAR_DELAY).unwrap();
        assert_eq!((v.label.as_str(), v.len, v.pos, v.elapsed), ("read 4096 B", 2000, 500, ITERS_BAR_DELAY));
    }
}
