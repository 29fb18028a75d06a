//! A standby writer's buffers and connection requests ([`Standby`]): made before a takeover,
//! so that the takeover does not pay for them.

use rpma::{ConnReq, MrLocal, Peer, Transport, Usage};

use super::connect;
use super::options::{LogOptions, ReplicaAddr};
use crate::error::{LogError, Result};
use crate::format;

/// The two buffers a writer of a log needs, each the size of the ring (its copy of the ring,
/// the source of every write, and the one histories are read into), a third one of that size
/// that the recovery parses histories in (plain memory, every page touched), and if asked its
/// connection requests ([`Standby::with_requests`]), made ahead of a takeover by a writer
/// standing by: [`Log::open_standby`](crate::Log::open_standby) uses them instead
/// of allocating and registering its own, which on rxe is most of a takeover of a large ring
/// (docs/log.md, "Takeover: what it costs").
///
/// They must be made on the peer the open is given (their registrations belong to its
/// protection domain: on another peer the open's reads fail, and the replicas are reported
/// down).
pub struct Standby<T: Transport> {
    pub(super) ring: MrLocal<T>,
    pub(super) scratch: MrLocal<T>,
    capacity: u64,
    /// The buffer recovery parses the replicas' histories in, its pages touched ahead (empty
    /// for an open's own buffers: it makes it as it goes).
    pub(super) view: Vec<u8>,
    /// Connection requests made ahead ([`Standby::with_requests`]), by replica.
    pub(super) requests: Vec<(ReplicaAddr, ConnReq<T>)>,
}

impl<T: Transport> std::fmt::Debug for Standby<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Standby")
            .field("capacity", &self.capacity)
            .field("requests", &self.requests.len())
            .finish_non_exhaustive()
    }
}

impl<T: Transport> Standby<T> {
    /// The buffers of a writer of a log whose replicas' regions are `region_len` bytes (the
    /// ring: the region less the header, rounded down to 8 bytes, as [`Replica::format`](
    /// crate::Replica::format) lays it out), allocated and registered on `peer`.
    ///
    /// # Errors
    /// [`LogError::Capacity`] if such a region holds no ring; [`LogError::Rpma`] if the
    /// allocation or a registration fails.
    pub fn for_region(peer: &Peer<T>, region_len: usize) -> Result<Self> {
        let Some(capacity) = format::ring_capacity(region_len as u64) else {
            return Err(LogError::Capacity {
                replica: "standby".into(),
                detail: format!(
                    "a region of {region_len} bytes holds no ring: the header takes {} and the ring at least {}",
                    format::HEADER,
                    format::MIN_CAPACITY
                ),
            });
        };
        let mut s = Self::new(peer, capacity)?;
        // Every page written now (not zeroed as a scan touches it, in the takeover).
        s.view = vec![0xff; s.ring.len()];
        Ok(s)
    }

    /// Buffers for a ring of `capacity` bytes on `peer` (what [`crate::Log::open`] allocates).
    pub(super) fn new(peer: &Peer<T>, capacity: u64) -> Result<Self> {
        let len = usize::try_from(capacity).map_err(|_| LogError::Invalid(format!("a ring of {capacity} bytes")))?;
        let ring = peer.alloc_mr(len, Usage::WRITE_SRC | Usage::READ_DST)?;
        let scratch = peer.alloc_mr(len.max(format::HEADER), Usage::READ_DST)?;
        Ok(Self { ring, scratch, capacity, view: Vec::new(), requests: Vec::new() })
    }

    /// Makes the connection requests to `replicas` ahead too, as `opts` configures them (for
    /// each a CM id with its address and route resolved, its queue pair and completion queue
    /// made): the takeover then only sends them, with its hello, and awaits the answers. Give
    /// the open the same replicas and options. A replica whose request cannot be made now gets
    /// one at the takeover; the requests serve the open's first round (a round that comes back
    /// above another writer's epoch makes new ones).
    ///
    /// # Errors
    /// [`LogError::Rpma`] if `opts` sets the connection out of range (the open would fail the
    /// same way).
    pub fn with_requests(mut self, peer: &Peer<T>, replicas: &[ReplicaAddr], opts: &LogOptions) -> Result<Self> {
        for r in replicas {
            if let Ok(req) = connect::conn_req(peer, r, opts)? {
                self.requests.push((r.clone(), req));
            }
        }
        Ok(self)
    }

    /// The replicas whose connection requests were made ahead ([`Standby::with_requests`]).
    #[must_use]
    pub fn requests(&self) -> usize {
        self.requests.len()
    }

    /// The ring's bytes these buffers are for.
    #[must_use]
    pub const fn capacity(&self) -> u64 {
        self.capacity
    }
}
