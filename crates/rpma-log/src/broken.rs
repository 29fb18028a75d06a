//! Deliberately broken variants of the protocol (feature `testing`): each switch turns one of
//! its rules off, so that the crash tests and the simulator show that they catch the loss it
//! causes (docs/log.md, "How it is proven"). Never for use outside tests.

/// Which rules of the protocol are switched off. All `false` (the default): the protocol as it
/// is. A writer reads the switches of its [`LogOptions`](crate::LogOptions), a replica those of
/// its [`ReplicaOptions`](crate::ReplicaOptions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Broken {
    /// Writer: a sync's flush of the entries is to visibility only, even in
    /// [`FlushMode::Persistent`](crate::FlushMode::Persistent).
    pub sync_flush_visibility: bool,
    /// Writer: a sync's batch has the writes and no flush: the completion of its last write is
    /// taken as the replica's acknowledgement.
    pub ack_before_flush: bool,
    /// Writer: recovery's tail scan takes records of any epoch, not only the replica's commit
    /// epoch (a fenced writer's records beyond the history a later writer installed count).
    pub tail_any_epoch: bool,
    /// Writer: a sync's commit word carries the position the sync is about to write and flush,
    /// ahead of its records (it may claim records a power cut then loses or tears).
    pub commit_word_ahead: bool,
    /// Writer: `open` chooses a history and repairs replicas as soon as it has one header, and
    /// checks its read quorum only afterwards (and goes on to the next history when one fails
    /// validation).
    pub repair_before_read_quorum: bool,
    /// Replica: an open in the epoch it promised, by the writer id it promised it to, is
    /// taken as that writer coming back (two writers of one writer id then share an epoch).
    pub open_in_the_promised_epoch: bool,
    /// Writer: a blank replica (formatted, never repaired: it lost its memory) counts towards
    /// the read quorum of `open` like any other.
    pub blank_replicas_vote: bool,
    /// Replica: the promise is one 64-byte block with a checksum, copied then persisted (a
    /// power cut may tear it at 8 bytes; its checksum then fails and the region is refused).
    pub epoch_block_checksum: bool,
    /// Writer: `reconnect` connects the replica itself even when the reconnect thread
    /// ([`LogOptions::reconnect_in_background`](crate::LogOptions::reconnect_in_background))
    /// connects it too, and the thread keeps an attempt that was due when the replica rejoined.
    pub reconnect_beside_the_thread: bool,
    /// Writer: a repair compares a pad's filler and the skip before the ring's end too (bytes no
    /// writer writes), so a replica whose filler differs has its commit lowered below entries it
    /// holds like the others before they are rewritten.
    pub compare_pad_filler: bool,
    /// Writer, [`Wait::Sleep`](crate::Wait::Sleep): after taking the completion events a sleep
    /// saw (which re-arms the queues), it sleeps again at once instead of polling the queues
    /// first (a completion that came between their last poll and the re-arming raised no
    /// event: the writer sleeps past it).
    pub sleep_without_repoll: bool,
    /// Writer: a repair raises a replica's commit word over the history it keeps without
    /// flushing that history first (what the fenced writer last wrote may be in the replica's
    /// memory only: the fence persists nothing).
    pub kept_history_unflushed: bool,
    /// Replica: a takeover leaves the previous writer's connection up (the fence is that
    /// connection's queue pair leaving the connected state: the old writer's writes go on
    /// landing).
    pub fence_keeps_connection: bool,
}

impl Broken {
    /// Every switch off.
    #[must_use]
    pub const fn none() -> Self {
        Self {
            sync_flush_visibility: false,
            ack_before_flush: false,
            tail_any_epoch: false,
            commit_word_ahead: false,
            repair_before_read_quorum: false,
            open_in_the_promised_epoch: false,
            blank_replicas_vote: false,
            epoch_block_checksum: false,
            reconnect_beside_the_thread: false,
            compare_pad_filler: false,
            sleep_without_repoll: false,
            kept_history_unflushed: false,
            fence_keeps_connection: false,
        }
    }
}
