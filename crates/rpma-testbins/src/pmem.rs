//! Mapping the persistent memory the programs check: a devdax device (or a file of a DAX file
//! system), `MAP_SYNC` required, shared with the device, so that plain CPU loads read what
//! survived a power cut and RDMA writes land in the device itself.
//!
//! Mapping is `unsafe` in `rpma-mem` (rule M5 of `docs/memory.md`: another program truncating
//! the file would make an access raise SIGBUS, and another writer would change bytes under a
//! plain slice). The programs pass the promise on to the scripts that run them: the device is
//! the test VM's emulated NVDIMM, which nothing else maps or writes while they run (the
//! replicas of `rpma-log-power-cut write` start only after its `regions` check has ended).
#![allow(unsafe_code)]

use std::path::Path;

use rpma::mem::{MapOptions, MapSync, MemError};
use rpma::Memory;

/// Maps `len` bytes of the persistent memory at `path` from byte `offset`, with `MAP_SYNC`.
///
/// # Errors
/// A missing or too short device, a misaligned offset, no `MAP_SYNC` (not persistent memory),
/// or a failing `open`/`mmap` ([`MemError`]).
pub fn map(path: &Path, offset: u64, len: usize) -> Result<Memory, MemError> {
    let options = MapOptions::new().offset(offset).len(len).map_sync(MapSync::Required);
    // SAFETY: [M5] the scripts that run these programs give them the test VM's persistent
    // memory, which no other program truncates or writes while it is mapped (module
    // documentation); the programs reach its bytes through the registered region or copies
    // (`Memory::to_vec`), and never shorten it (a devdax device cannot be).
    unsafe { options.map(path) }
}
