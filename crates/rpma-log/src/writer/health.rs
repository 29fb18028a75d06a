//! Looking after the replicas: reconnecting one that is down and catching it up, taking the
//! connection events, and the backoff of `Log::maintain`.

use super::*;

/// The error of a reconnect the replica refused: its promise is another writer's now.
fn fenced(addr: &ReplicaAddr, promised: u64) -> LogError {
    LogError::NoQuorum {
        up: 0,
        needed: 1,
        detail: format!("{addr}: it promised epoch {promised}: this writer is fenced"),
    }
}

impl<T: Transport> Log<T> {
    /// Connects a replica that is down again (with the writer's own epoch and id: a reconnect,
    /// which the replica takes only while its promise is still this writer's) and catches it up
    /// from the writer's copy: what it holds of the writer's history is kept, the rest copied,
    /// then committed. A replica whose head is beyond the writer's (another writer truncated
    /// further there) gets a full copy of the writer's live range (docs/log.md, "Full copy").
    /// Does nothing for a replica that is connected. With
    /// [`LogOptions::reconnect_in_background`] the thread makes the connection (one path
    /// connects a replica, never two at once): this asks it to try now, waits for what it hands
    /// over (at most the log's timeout) and catches the replica up.
    ///
    /// # Errors
    /// [`LogError::Invalid`] for an index outside the set; [`LogError::NoQuorum`] with the
    /// replica's reason if it cannot be reached or was taken over by another writer (this
    /// writer is fenced there); [`LogError::CorruptHeader`], [`LogError::WrongLogId`],
    /// [`LogError::Capacity`] as for [`Log::open`].
    pub fn reconnect(&mut self, replica: usize) -> Result<()> {
        let addr = self
            .slots
            .get(replica)
            .map(|s| s.addr.clone())
            .ok_or_else(|| LogError::Invalid(format!("no replica {replica} (the set has {})", self.slots.len())))?;
        if self.slots[replica].conn.is_some() {
            return Ok(());
        }
        if self.reconnector.is_some() && !self.opts.rules_off().reconnect_beside_the_thread {
            return self.reconnect_through_the_thread(replica, &addr);
        }
        match connect::connect(&self.peer, &addr, &self.opts, (self.epoch, self.writer_id, Ask::Reconnect))? {
            Connected::Accepted(conn, remote, cap) => self.rejoin(replica, conn, remote, cap),
            Connected::Stale(p) => Err(fenced(&addr, p)),
            Connected::Down(why) => Err(LogError::NoQuorum { up: 0, needed: 1, detail: format!("{addr}: {why}") }),
        }
    }

    /// [`Log::reconnect`] with the reconnect thread: asks it to connect `replica` now and takes
    /// what it hands over until that replica's attempt is in (others' are taken too).
    fn reconnect_through_the_thread(&mut self, replica: usize, addr: &ReplicaAddr) -> Result<()> {
        let deadline = self.peer.runtime().now() + self.opts.timeout;
        let sleep = self.opts.wait == Wait::Sleep;
        if let Some(r) = &self.reconnector {
            if sleep {
                r.wake_on_handover(Some(self.peer.runtime().waker()));
            }
            r.tell(reconnector::Request::Now(replica));
        }
        let outcome = loop {
            if let Some(outcome) = self.take_handovers_for(Some(replica)) {
                break outcome;
            }
            if self.slots[replica].conn.is_some() {
                break Ok(());
            }
            if self.peer.runtime().now() > deadline {
                break Err(LogError::NoQuorum {
                    up: 0,
                    needed: 1,
                    detail: format!("{addr}: the reconnect thread handed nothing over within {:?}", self.opts.timeout),
                });
            }
            if sleep {
                self.peer.runtime().park(Some(deadline));
            } else {
                self.peer.runtime().pause(deadline);
            }
        };
        if let (true, Some(r)) = (sleep, &self.reconnector) {
            r.wake_on_handover(None);
        }
        outcome
    }

    /// Takes replica `replica`'s new connection and catches it up (the repair, a full copy if
    /// its head is beyond the writer's); marks it down with the reason if that fails.
    fn rejoin(&mut self, replica: usize, conn: Conn<T>, remote: MrRemote, cap: u64) -> Result<()> {
        let addr = self.slots[replica].addr.clone();
        let down = |why: String| LogError::NoQuorum { up: 0, needed: 1, detail: format!("{addr}: {why}") };
        if cap != self.cap {
            let _ = conn.disconnect();
            let e = LogError::Capacity {
                replica: addr.to_string(),
                detail: format!("its ring has {cap} bytes, the log's {}", self.cap),
            };
            self.mark_down(replica, e.to_string());
            return Err(e);
        }
        let s = &mut self.slots[replica];
        s.conn = Some(conn);
        s.event = false;
        s.remote = Some(remote);
        s.inflight = 0;
        self.set_health(replica, Health::CatchingUp);
        let h = match self.read_header(replica) {
            Ok(h) => h,
            Err(HeaderError::Fatal(e)) => {
                self.mark_down(replica, e.to_string());
                return Err(e);
            }
            Err(HeaderError::Down(why)) => {
                self.mark_down(replica, why.clone());
                return Err(down(why));
            }
        };
        if let Err(why) = self.repair(replica, &h, None) {
            self.mark_down(replica, why.clone());
            return Err(down(why));
        }
        if let Some(r) = &self.reconnector {
            r.tell(reconnector::Request::Rejoined(replica));
        }
        Ok(())
    }

    /// Takes the connections the reconnect thread handed over and catches each replica up;
    /// a failed attempt of the thread is a `Down` event with its reason. Returns the replicas
    /// brought back.
    pub(super) fn take_handovers(&mut self) -> Vec<usize> {
        let mut back = Vec::new();
        while let Some(h) = self.reconnector.as_ref().and_then(reconnector::Reconnector::take) {
            if let (replica, Ok(true)) = self.take_handover(h) {
                back.push(replica);
            }
        }
        back
    }

    /// Takes what the reconnect thread handed over, up to the outcome of `replica`'s attempt,
    /// which it returns (`None`: not in yet).
    fn take_handovers_for(&mut self, replica: Option<usize>) -> Option<Result<()>> {
        while let Some(h) = self.reconnector.as_ref().and_then(reconnector::Reconnector::take) {
            let (i, outcome) = self.take_handover(h);
            if Some(i) == replica {
                return Some(outcome.map(|_| ()));
            }
        }
        None
    }

    /// Takes one handover: a connection is caught up (`Ok(true)`; `Ok(false)` if the replica
    /// was connected meanwhile), a failure becomes a `Down` event and the error.
    fn take_handover(&mut self, h: reconnector::Handover<T>) -> (usize, Result<bool>) {
        match h {
            reconnector::Handover::Connected { replica, conn, remote, cap } => {
                if self.slots[replica].conn.is_some() {
                    let _ = conn.disconnect();
                    if let Some(r) = &self.reconnector {
                        r.tell(reconnector::Request::Rejoined(replica));
                    }
                    return (replica, Ok(false));
                }
                match self.rejoin(replica, conn, remote, cap) {
                    Ok(()) => (replica, Ok(true)),
                    Err(e) => {
                        self.event(replica, Health::Down, Some(format!("reconnecting: {e}")));
                        (replica, Err(e))
                    }
                }
            }
            reconnector::Handover::Failed { replica, why } => {
                self.event(replica, Health::Down, Some(format!("reconnecting: {why}")));
                let addr = self.slots[replica].addr.clone();
                (replica, Err(LogError::NoQuorum { up: 0, needed: 1, detail: format!("{addr}: {why}") }))
            }
        }
    }

    /// Takes the connection events of every replica connected, without waiting: a replica whose
    /// connection was lost or closed (its node died, its process ended) is marked down now,
    /// before anything more is posted to it (otherwise the writer learns it from the error
    /// completions of its next operations).
    pub fn refresh_health(&mut self) {
        for i in 0..self.slots.len() {
            let Some(conn) = self.slots[i].conn.as_ref() else { continue };
            match conn.next_event_timeout(Duration::from_micros(1)) {
                Ok(ConnEvent::Lost) => self.mark_down(i, "its connection was lost".into()),
                Ok(ConnEvent::Closed) => self.mark_down(i, "it closed its connection".into()),
                Ok(ev) => self.mark_down(i, format!("unexpected connection event: {}", ev.as_str())),
                Err(e) if e.kind() == ErrorKind::NoEvent => {}
                Err(e) => self.mark_down(i, format!("taking its connection events: {e}")),
            }
        }
    }

    /// Looks after the replicas: takes their connection events ([`Log::refresh_health`]), then
    /// tries to reconnect and catch up each replica that is down ([`Log::reconnect`]), with a
    /// backoff per replica: after a failed attempt the next one waits 10 ms, doubled after each
    /// failure up to 2 s, reset by a success. Never blocks longer than the attempts it makes.
    /// Returns the replicas it brought back (each also has its [`HealthEvent`]s); a failure is
    /// a `Down` event with its reason. A replica this writer is fenced on stays down and is tried
    /// again after its backoff.
    ///
    /// With [`LogOptions::reconnect_in_background`] the attempts are the thread's: `maintain`
    /// takes the connection events and the connections the thread handed over, and catches
    /// those replicas up.
    pub fn maintain(&mut self) -> Vec<usize> {
        self.refresh_health();
        if self.reconnector.is_some() {
            return self.take_handovers();
        }
        let now = self.peer.runtime().now();
        let mut back = Vec::new();
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            if s.conn.is_some() || s.retry_at.is_some_and(|t| t > now) {
                continue;
            }
            match self.reconnect(i) {
                Ok(()) => {
                    let s = &mut self.slots[i];
                    s.retry_at = None;
                    s.backoff = self.opts.backoff.0;
                    back.push(i);
                }
                Err(e) => {
                    let s = &mut self.slots[i];
                    s.retry_at = Some(now + s.backoff);
                    s.backoff = (s.backoff * 2).min(self.opts.backoff.1);
                    self.event(i, Health::Down, Some(format!("reconnecting: {e}")));
                }
            }
        }
        back
    }
}
