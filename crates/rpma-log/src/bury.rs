//! Connections given up on are released on a thread of their own.
//!
//! Releasing a connection whose peer is gone or unreachable blocks for as long as the transport's
//! connection manager retries its messages: on rxe, `rdma_destroy_id` of a connection whose peer
//! lost power waits for the CM's DREQ (or, while connecting, REQ) retries, about a minute
//! (`scripts/test-cluster.sh` found it: a writer's sync, and a new writer's open, hung that long
//! behind one dead replica). A writer that marks a replica down, or stops waiting for one to
//! connect, and a replica that takes a new writer over the old one's connection, must not wait
//! for that: [`bury`] hands the connection to a thread of the transport's runtime
//! ([`rpma::runtime::Runtime::spawn`]) that disconnects and drops it.

use rpma::{Conn, Peer, Transport};

/// Disconnects and releases `conn` on a thread of `peer`'s runtime, without waiting for it (in
/// place if no thread can be started).
pub(crate) fn bury<T: Transport>(peer: &Peer<T>, conn: Conn<T>) {
    let release = move || {
        let _ = conn.disconnect();
        drop(conn);
    };
    // A failed spawn drops the closure, and the connection with it, here.
    let _detached = peer.runtime().spawn("rpma-log-release", Box::new(release));
}
