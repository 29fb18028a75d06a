//! Looking after the replicas: reconnecting one that is down and catching it up, taking the
//! connection events, and the backoff of `Log::maintain`.

use super::*;

impl<T: Transport> Log<T> {
    /// Connects a replica that is down again (with the writer's own epoch and id) and catches
    /// it up from the writer's copy: what it holds of the writer's history is kept, the rest
    /// copied, then committed. A replica whose head is beyond the writer's (another writer
    /// truncated further there) gets a full copy of the writer's live range (docs/log.md,
    /// "Full copy"). Does nothing for a replica that is connected.
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
        match Self::connect(&self.peer, &addr, &self.opts, self.epoch, self.writer_id)? {
            Connected::Accepted(conn, remote, cap) => self.rejoin(replica, conn, remote, cap),
            Connected::Stale(p) => Err(LogError::NoQuorum {
                up: 0,
                needed: 1,
                detail: format!("{addr}: it promised epoch {p}: this writer is fenced"),
            }),
            Connected::Down(why) => Err(LogError::NoQuorum { up: 0, needed: 1, detail: format!("{addr}: {why}") }),
        }
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
        if let Err(why) = self.repair(replica, &h) {
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
            match h {
                reconnector::Handover::Connected { replica, conn, remote, cap } => {
                    if self.slots[replica].conn.is_some() {
                        // Reconnected meanwhile (by `reconnect`): this one is not needed.
                        let _ = conn.disconnect();
                        continue;
                    }
                    match self.rejoin(replica, conn, remote, cap) {
                        Ok(()) => back.push(replica),
                        Err(e) => self.event(replica, Health::Down, Some(format!("reconnecting: {e}"))),
                    }
                }
                reconnector::Handover::Failed { replica, why } => {
                    self.event(replica, Health::Down, Some(format!("reconnecting: {why}")));
                }
            }
        }
        back
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
                Err(e) if e.kind() == rpma::ErrorKind::NoEvent => {}
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
        let now = Instant::now();
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
                    s.backoff = MIN_BACKOFF;
                    back.push(i);
                }
                Err(e) => {
                    let s = &mut self.slots[i];
                    s.retry_at = Some(Instant::now() + s.backoff);
                    s.backoff = (s.backoff * 2).min(MAX_BACKOFF);
                    self.event(i, Health::Down, Some(format!("reconnecting: {e}")));
                }
            }
        }
        back
    }
}
