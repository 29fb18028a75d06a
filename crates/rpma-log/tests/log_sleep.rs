//! tests/log.rs's tests (appends, group commit, recovery, the ring, quorum, fencing, reconnect,
//! a sync failing on one replica) with the writer sleeping on its replicas' completion channels
//! (`Wait::Sleep`), on the mock in its deferred mode with writes landing in 8-byte pieces: the
//! fabric's progress thread completes them, so the writer sleeps in poll(2) and is woken by
//! their completion events.

#[path = "log.rs"]
mod log;
