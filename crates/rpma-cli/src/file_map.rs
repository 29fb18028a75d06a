//! `--file`: the side's memory is a shared mapping of the file (librpma's examples map it with
//! `pmem_map_file`), so what a peer writes and flushes lands in the file itself.
//!
//! This is the `rpma` command's one `unsafe` call: mapping a file is `unsafe` in `rpma-mem`
//! (rule M5 of `docs/memory.md`: another program truncating the file would make an access raise
//! SIGBUS, and another writer would change bytes under a plain slice). The command passes the
//! promise on to its user, as every program that maps a file does: `rpma server --help` and
//! `docs/cli.md` say that nothing else may truncate or write a `--file` while `rpma` runs. The
//! scenarios, the benchmark's `--pmem` and `rpma log` map through [`map_file`], which the
//! command hands them (`rpma_scenarios::common::MapFile`).
#![allow(unsafe_code)]

use std::path::Path;

use rpma::mem::{MapOptions, MapSync, MemError};
use rpma::Memory;

/// Maps `len` bytes of the file at `path` from byte `offset` (created and extended with zeros
/// first if `create`), shared with the file ([`MapOptions::map`]); `MAP_SYNC` where the file
/// system supports it, and required with `pmem` (`--pmem`: a devdax device or a file of a DAX
/// file system; anything else is [`MemError::MapSyncUnsupported`]).
///
/// # Errors
/// A missing or too short file without `create`, a directory or special file, a misaligned
/// offset, no `MAP_SYNC` with `pmem`, or a failing `open`/`mmap` ([`MemError`]).
pub(crate) fn map_file(path: &Path, offset: u64, len: usize, create: bool, pmem: bool) -> Result<Memory, MemError> {
    let sync = if pmem { MapSync::Required } else { MapSync::IfSupported };
    let options = MapOptions::new().offset(offset).len(len).create(create).map_sync(sync);
    // SAFETY: [M5] the user of `--file` promises that no other program truncates or writes the
    // file while this process maps it (documented in `rpma server --help` and docs/cli.md); this
    // process itself reaches the bytes only through the registered region (M2/M3 as for any
    // region) and never shortens the file: it extends a file only holding the lock on its range,
    // and only ever lengthens it (rpma_scenarios::common). A devdax device is never truncated.
    unsafe { options.map(path) }
}
