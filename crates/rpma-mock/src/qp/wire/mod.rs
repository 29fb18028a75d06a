//! The cross-process mode: a queue pair whose peer lives in another process on the same host.
//!
//! A listening endpoint publishes a Unix socket in the fabric's rendezvous directory
//! ([`MockFabricBuilder::rendezvous`](crate::MockFabricBuilder::rendezvous)); a connection
//! request for an address and port nobody listens on in this process goes there. Each connection
//! is one socket carrying [frames](frame): the connection manager's exchange (hello with the
//! private data, accept or reject, disconnect request and answer, goodbye) and the work
//! requests, each executed by the *responder's* process against its own registrations, checked
//! as for a peer in the same process. No memory is shared between the processes: a peer that
//! could map a region could reach it without its rkey, so every remote access goes through the
//! owner's checks ([`link`]).

pub(crate) mod frame;
pub(crate) mod link;
pub(crate) mod rendezvous;

pub(crate) use link::Link;
