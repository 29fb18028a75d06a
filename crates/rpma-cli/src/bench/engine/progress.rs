//! The progress bar of a run (on stderr, when it is a terminal and a run lasts over a second).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::bench::{Amount, Op, Plan};

/// Shared progress of the current run.
pub(super) struct Progress {
    pub(super) run: AtomicUsize,
    pub(super) done: AtomicU64,
    pub(super) finished: AtomicBool,
}

pub(super) fn show_progress(plan: &Plan, runs: &[(Op, usize)], progress: &Progress) {
    let tty = plan.progress && std::io::stderr().is_terminal();
    let mut current = usize::MAX;
    let mut started = Instant::now();
    let mut bar: Option<ProgressBar> = None;
    while !progress.finished.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(50));
        if !tty {
            continue;
        }
        let run = progress.run.load(Ordering::Acquire);
        if run != current {
            if let Some(b) = bar.take() {
                b.finish_and_clear();
            }
            current = run;
            started = Instant::now();
        }
        let Some(&(op, size)) = runs.get(run) else { continue };
        if bar.is_none() && started.elapsed() >= Duration::from_secs(1) {
            let len = match plan.amount {
                Amount::Iters(n) => (n + plan.warmup) * plan.conns as u64,
                Amount::Duration(d) => d.as_millis() as u64,
            };
            let b = ProgressBar::new(len);
            let style = ProgressStyle::with_template("{msg} [{bar:40}] {percent}% {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar());
            b.set_style(style.progress_chars("=> "));
            b.set_message(format!("{} {size} B", op.name()));
            bar = Some(b);
        }
        if let Some(b) = &bar {
            match plan.amount {
                Amount::Iters(_) => b.set_position(progress.done.load(Ordering::Relaxed)),
                Amount::Duration(_) => b.set_position(started.elapsed().as_millis() as u64),
            }
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
}
