//! Raw memory of rpma-rs: the one small place where allocation, mapping and access to bytes that
//! a NIC or a remote peer may write are done with `unsafe` code, so that the crates above it
//! (`rpma-core`, `rpma-mock`, `rpma`) stay `#![forbid(unsafe_code)]`.
//!
//! # The model
//!
//! Memory registered for RDMA is written by hardware and by remote peers, outside the Rust
//! abstract machine and without asking. Rust references (`&[u8]`, `&mut [u8]`) promise the
//! compiler that nobody else writes the bytes behind them, so they must not point at such
//! bytes. This crate follows the model of `vm-memory`'s guest memory, written down as rules
//! M1-M6 in `docs/memory.md` (every `// SAFETY:` comment names the rule it relies on):
//!
//! - [`Memory`] **owns** bytes (M1): heap ([`Memory::zeroed`], [`Memory::aligned`]), huge
//!   pages ([`Memory::huge_pages`]), a `Vec`/`Box` handed over without a copy, a file or devdax
//!   mapping ([`MapOptions::map`], M5), or raw memory ([`Memory::from_raw_parts`], M6). They are
//!   released only when it is dropped; memory whose deregistration failed is
//!   [leaked](Memory::leak).
//! - Shared access goes through a [`VolatileSlice`] (M2): every access to the bytes is atomic,
//!   with one size per byte (through its 8-aligned word when that word lies wholly in the
//!   memory, as a byte at the memory's unaligned ends), and no reference to the bytes is ever
//!   made. A concurrent change gives unspecified bytes, neither a data race nor a race of
//!   accesses of different sizes.
//! - A plain slice comes only from `&mut Memory` (M3), which proves that no other Rust handle
//!   exists; the code that registered the memory must also know that no device can reach it.
//! - Every accessor checks its range, without overflow, before touching anything (M4) and
//!   returns [`MemError::OutOfBounds`] otherwise.
//!
//! # Example
//!
//! ```
//! use std::sync::atomic::Ordering;
//! use rpma::mem::MemoryKind;
//! use rpma::Memory;
//!
//! let mut mem = Memory::from_vec(vec![0u8; 4096]);
//! let v = mem.volatile(); // what a NIC writes, what a peer reads
//! v.write(0, b"ping")?;
//! v.store_u64(8, 42, Ordering::Release)?;
//! assert_eq!(v.load_u64(8, Ordering::Acquire)?, 42);
//! assert!(v.write(4094, b"pong").is_err()); // out of bounds: nothing written
//!
//! // No device or peer holds it any more: plain slices are fine.
//! assert_eq!(&mem.as_slice()[..4], b"ping");
//! assert_eq!(mem.kind(), MemoryKind::Vec);
//! let ptr = mem.as_ptr();
//! let back = mem.into_vec().unwrap(); // the same allocation, not a copy
//! assert_eq!(back.as_ptr(), ptr.cast_const());
//! # Ok::<(), rpma::mem::MemError>(())
//! ```
//!
//! The crate is for Linux (`mmap`, `MAP_SYNC`, `MAP_HUGETLB`, sysfs).

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod alloc;
mod atomic_copy;
mod devdax;
mod error;
mod map;
mod memory;
mod owner;
mod persist;
mod sys;
mod volatile;

pub use error::{MemError, Result};
pub use map::{MapOptions, MapSync};
pub use memory::{Memory, MemoryKind};
pub use owner::Release;
pub use persist::{cpu_persist_method, PersistMethod};
pub use sys::page_size;
pub use volatile::VolatileSlice;
