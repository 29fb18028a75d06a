//! A scenario's server and clients as separate processes of the `rpma` binary (`rpma server`,
//! then `rpma client`s): their arguments, and running them with a deadline. Used by
//! `rpma demo --two-process` (on the mock's cross-process mode) and by the tests on verbs.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::Scenario;

/// A process with its output (stdout and stderr) going to a file.
#[derive(Debug)]
pub struct Proc {
    name: String,
    child: Child,
    out: PathBuf,
    status: Option<ExitStatus>,
}

impl Proc {
    /// Starts `program` with `args` and `env` (added to this process's environment), its output
    /// in `dir/<name>.out`.
    ///
    /// # Errors
    /// If the output file cannot be created or the program cannot be started.
    pub fn spawn(name: &str, dir: &Path, program: &Path, args: &[String], env: &[(String, OsString)]) -> Result<Self> {
        let out = dir.join(format!("{name}.out"));
        let f = File::create(&out).with_context(|| format!("creating {}", out.display()))?;
        let f2 = f.try_clone().with_context(|| format!("duplicating {}", out.display()))?;
        let child = Command::new(program)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(f)
            .stderr(f2)
            .spawn()
            .with_context(|| format!("starting {} {}", program.display(), args.join(" ")))?;
        Ok(Self { name: name.to_owned(), child, out, status: None })
    }

    /// What the process printed so far.
    #[must_use]
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_else(|e| format!("(cannot read {}: {e})", self.out.display()))
    }

    /// The process's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits for every process until `timeout` (the hung ones are killed): whether all exited 0,
/// and each process's status and output.
///
/// # Errors
/// If waiting for a process fails.
pub fn wait_all(procs: &mut [Proc], timeout: Duration) -> Result<(bool, String)> {
    let deadline = Instant::now() + timeout;
    let mut hung = false;
    while procs.iter().any(|p| p.status.is_none()) {
        for p in procs.iter_mut().filter(|p| p.status.is_none()) {
            p.status = p.child.try_wait().with_context(|| format!("waiting for the {}", p.name))?;
        }
        if Instant::now() > deadline {
            hung = true;
            for p in procs.iter_mut().filter(|p| p.status.is_none()) {
                let _ = p.child.kill();
                p.status = p.child.wait().ok();
                p.name.push_str(" (killed: hung)");
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let ok = !hung && procs.iter().all(|p| p.status.is_some_and(|s| s.success()));
    let mut report = String::new();
    for p in procs.iter() {
        let status = p.status.map_or_else(|| "unknown".to_owned(), |s| s.to_string());
        report.push_str(&format!("--- {} ({status}):\n{}", p.name, p.output()));
    }
    Ok((ok, report))
}

/// A scenario's own arguments as separate processes: the server's, each client's, and how many
/// clients (files of the file-backed scenarios go into `dir`).
#[must_use]
pub fn scenario_args(s: Scenario, dir: &Path) -> (Vec<String>, Vec<String>, usize) {
    let file = || {
        let path = dir.join(format!("{}.pmem", s.name())).display().to_string();
        vec!["--file".to_owned(), path, "--file-create".to_owned()]
    };
    let v = |a: &[&str]| a.iter().map(ToString::to_string).collect::<Vec<_>>();
    match s {
        Scenario::ReadToPersistent
        | Scenario::WriteToPersistent
        | Scenario::FlushToPersistentGpspm
        | Scenario::FlushToPersistentGpspmSharedChannel => (file(), Vec::new(), 1),
        Scenario::FlushToPersistent => {
            let mut a = file();
            a.push("--direct-pmem-write".into());
            (a, Vec::new(), 1)
        }
        Scenario::AtomicWrite => (file(), v(&["--word", "hello", "--word", "rdma"]), 1),
        Scenario::SendWithImm => (Vec::new(), v(&["--word", "msg", "--imm", "77"]), 1),
        Scenario::MultipleConnections
        | Scenario::MultipleConnectionsSharedChannel
        | Scenario::MessagesPingPongWithSrq => (v(&["--clients", "2"]), Vec::new(), 2),
        _ => (Vec::new(), Vec::new(), 1),
    }
}

/// How to run a scenario as processes: the `rpma` binary, the backend and address, and the
/// environment added to each process.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The `rpma` binary.
    pub program: PathBuf,
    /// `mock` or `verbs`.
    pub backend: String,
    /// The server's address.
    pub addr: String,
    /// Added to each process's environment.
    pub env: Vec<(String, OsString)>,
    /// How long the processes may take together.
    pub timeout: Duration,
}

impl Launch {
    /// Runs `s` as `rpma server` and its `rpma client`(s) on `port`, files and outputs in `dir`:
    /// whether every process exited 0, and their outputs.
    ///
    /// # Errors
    /// If a process cannot be started or waited for.
    pub fn run(&self, s: Scenario, port: u16, dir: &Path) -> Result<(bool, String)> {
        let (sargs, cargs, clients) = scenario_args(s, dir);
        self.run_with(s, port, dir, sargs, &cargs, clients)
    }

    /// [`run`](Self::run) with the server's scenario arguments `sargs` (e.g. `--pmem` instead of
    /// `--file`), each of `clients` clients' `cargs`.
    ///
    /// # Errors
    /// If a process cannot be started or waited for.
    pub fn run_with(
        &self,
        s: Scenario,
        port: u16,
        dir: &Path,
        sargs: Vec<String>,
        cargs: &[String],
        clients: usize,
    ) -> Result<(bool, String)> {
        let common = |cmd: &str| {
            let mut a =
                vec![cmd.to_owned(), "--backend".into(), self.backend.clone(), "--addr".into(), self.addr.clone()];
            a.extend(["--port".into(), port.to_string(), "--scenario".into(), s.name()]);
            a
        };
        let mut procs = Vec::new();
        let mut a = common("server");
        a.extend(sargs);
        procs.push(Proc::spawn("server", dir, &self.program, &a, &self.env)?);
        for i in 0..clients {
            let mut a = common("client");
            a.extend(cargs.iter().cloned());
            a.extend(["--retries", "200", "--retry-delay", "100"].map(String::from));
            procs.push(Proc::spawn(&format!("client{i}"), dir, &self.program, &a, &self.env)?);
        }
        wait_all(&mut procs, self.timeout)
    }
}
