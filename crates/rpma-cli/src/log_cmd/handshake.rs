//! The floor of a takeover's `connect` phase (`rpma log bench --mode failover`, replicas of this
//! process): rounds of bare handshakes with as many servers as the log has replicas.
//!
//! Each server waits for requests on a thread of its own as a replica does (on its endpoint, the
//! replicas' poll interval at most) and answers at once, with private data of a replica's
//! answer's size; the client makes its requests ahead, as a writer standing by does, sends them
//! all, then takes the answers. What a takeover's `connect` adds to this is the replicas' own
//! work between the request and the answer (the header read, the old writer's connection
//! fenced, the promise persisted) and the hello's checks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rpma::{Conn, ConnCfg, ConnEvent, ConnReq, Ep, ErrorKind, Peer, Transport};
use rpma_scenarios::common::server_peer;

use super::report::median;

/// The private data of a request and of an answer: about a log's hello and a replica's answer.
const HELLO: [u8; 32] = [0x48; 32];
const ANSWER: [u8; 56] = [0x41; 56];
/// How long a server's wait for a request lasts before it looks at its stop flag (the bench's
/// replicas' poll interval).
const POLL: Duration = Duration::from_millis(5);
/// Each connection's queues, as a writer's (rpma-log's `SQ`).
const QUEUE: u32 = 256;

/// Servers answering handshakes, each on its own thread, until dropped.
struct Servers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Result<()>>>,
}

impl Servers {
    /// `n` servers on `addr`, ports `port..port + n`.
    fn start<T: Transport>(t: &T, addr: &str, port: u16, n: usize) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut servers = Servers { stop: Arc::clone(&stop), threads: Vec::new() };
        for i in 0..n {
            let port = port.checked_add(i as u16).context("--port: no room for the handshake's servers")?;
            let peer = server_peer(t, addr)?;
            let ep = Ep::listen(&peer, addr, &port.to_string())
                .with_context(|| format!("a handshake server listening on {addr}:{port}"))?;
            let stop = Arc::clone(&stop);
            servers.threads.push(std::thread::spawn(move || {
                let r = serve(&ep, &stop);
                // The endpoint before its peer.
                drop(ep);
                drop(peer);
                r
            }));
        }
        Ok(servers)
    }

    /// Stops the servers and returns the first one's failure.
    fn stop(mut self) -> Result<()> {
        self.stop.store(true, Ordering::Release);
        let mut first = Ok(());
        for t in self.threads.drain(..) {
            let r = t.join().map_err(|_| anyhow::anyhow!("a handshake server panicked")).and_then(|r| r);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Answers every request on `ep` at once, keeping the last connection (the one before is
/// disconnected when the next request is answered, as a replica fences its old writer).
fn serve<T: Transport>(ep: &Ep<T>, stop: &AtomicBool) -> Result<()> {
    let mut last: Option<Conn<T>> = None;
    while !stop.load(Ordering::Acquire) {
        match ep.next_conn_req_timeout(None, POLL) {
            Ok(req) => {
                if let Some(old) = last.take() {
                    let _ = old.disconnect();
                }
                // A client that gave up is its own loss: the next request is served.
                last = req.connect(Some(&ANSWER)).ok();
            }
            Err(e) if e.kind() == ErrorKind::NoEvent => {}
            Err(e) => return Err(anyhow::Error::new(e).context("a handshake server's endpoint")),
        }
    }
    Ok(())
}

/// Bare handshakes with `n` servers of this process, timed round by round (each takeover is
/// preceded by one, so that both see the same machine).
pub(super) struct Floor<T: Transport> {
    servers: Servers,
    client: Peer<T>,
    cfg: ConnCfg<T>,
    addr: String,
    port: u16,
    n: usize,
    timeout: Duration,
    times: Vec<u64>,
}

impl<T: Transport> Floor<T> {
    /// Starts `n` servers on `addr`, ports `port..port + n`, for `client` to connect to.
    ///
    /// # Errors
    /// A server that cannot listen.
    pub(super) fn start(
        t: &T,
        client: &Peer<T>,
        (addr, port): (&str, u16),
        n: usize,
        timeout: Duration,
    ) -> Result<Self> {
        Ok(Self {
            servers: Servers::start(t, addr, port, n)?,
            client: client.clone(),
            cfg: ConnCfg::new().with_sq_size(QUEUE).with_cq_size(QUEUE).with_timeout(timeout),
            addr: addr.to_owned(),
            port,
            n,
            timeout,
            times: Vec::new(),
        })
    }

    /// One round: from the first request sent to the last answer taken.
    ///
    /// # Errors
    /// A connection that cannot be made or is not established within the timeout.
    pub(super) fn round(&mut self) -> Result<()> {
        // Made ahead, as a standby's: CM ids, addresses and routes resolved, queue pairs made.
        let mut reqs = Vec::with_capacity(self.n);
        for i in 0..self.n {
            let p = (self.port + i as u16).to_string();
            let req = ConnReq::new(&self.client, &self.addr, &p, Some(&self.cfg));
            reqs.push(req.with_context(|| format!("a request to {}:{p}", self.addr))?);
        }
        let s = Instant::now();
        let mut conns = Vec::with_capacity(self.n);
        for r in reqs {
            conns.push(r.connect(Some(&HELLO)).context("a handshake's request")?);
        }
        for c in &conns {
            match c.next_event_timeout(self.timeout).context("a handshake's answer")? {
                ConnEvent::Established => {}
                ev => bail!("a handshake answered {ev:?} instead of ESTABLISHED"),
            }
        }
        self.times.push(u64::try_from(s.elapsed().as_nanos()).unwrap_or(u64::MAX));
        for c in conns {
            let _ = c.disconnect();
        }
        Ok(())
    }

    /// Stops the servers; the median of the rounds, nanoseconds.
    ///
    /// # Errors
    /// A server that failed, or no round.
    pub(super) fn finish(self) -> Result<u64> {
        self.servers.stop()?;
        median(self.times).context("no handshake rounds")
    }
}
