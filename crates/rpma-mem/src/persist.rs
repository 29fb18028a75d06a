//! Local persistence: [`Memory::persist`] writes a range's CPU cache lines back to memory and
//! fences, as libpmem's `pmem_persist` does (rule M7 of `docs/memory.md`), or `msync`s a file
//! mapping that has a page cache.
//!
//! On x86-64 the instruction is chosen once per process from CPUID: `CLWB` (writes the line
//! back and may keep it cached), else `CLFLUSHOPT` (writes it back and evicts it), each followed
//! by one `SFENCE` for the whole range, else `CLFLUSH` (ordered by itself: no fence needed, one
//! is issued anyway, which costs nothing next to the flushes). On other architectures no cache
//! write-back is implemented: `persist` is a full memory fence there
//! ([`PersistMethod::Fence`]), which makes the stores visible but not durable on pmem.

use std::fmt;
use std::sync::OnceLock;

use crate::error::{check_range, Result};
use crate::memory::{Memory, MemoryKind};

/// The cache line size the write-back steps by (64 bytes on every x86-64 CPU; libpmem's
/// `FLUSH_ALIGN`). A larger real line is still covered: every 64-byte step lies in a line.
const LINE: usize = 64;

/// How [`Memory::persist`] makes a range durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PersistMethod {
    /// `CLWB` of every cache line of the range, then `SFENCE`.
    Clwb,
    /// `CLFLUSHOPT` of every cache line of the range, then `SFENCE`.
    ClflushOpt,
    /// `CLFLUSH` of every cache line of the range (serialising by itself).
    Clflush,
    /// `msync(MS_SYNC)` of the pages of the range: a file mapping with a page cache (not
    /// `MAP_SYNC`).
    Msync,
    /// A full memory fence only: no cache write-back instruction on this architecture.
    Fence,
}

impl PersistMethod {
    /// The method's name as `rpma devices` prints it: `clwb`, `clflushopt`, `clflush`, `msync`,
    /// `fence`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Clwb => "clwb",
            Self::ClflushOpt => "clflushopt",
            Self::Clflush => "clflush",
            Self::Msync => "msync",
            Self::Fence => "fence",
        }
    }
}

impl fmt::Display for PersistMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The CPU's cache write-back method (what [`Memory::persist`] uses on memory without a page
/// cache: devdax, `MAP_SYNC` files, and any other memory), detected once.
#[must_use]
pub fn cpu_persist_method() -> PersistMethod {
    static METHOD: OnceLock<PersistMethod> = OnceLock::new();
    *METHOD.get_or_init(detect)
}

/// CPUID leaf 7's EBX: (CLFLUSHOPT, CLWB), bits 23 and 24 (std's feature detection knows
/// neither name).
#[cfg(target_arch = "x86_64")]
fn cpuid_flushes() -> (bool, bool) {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    #[allow(unused_unsafe)]
    // SAFETY: [M7] CPUID exists on every x86-64 CPU; leaf 7 is read only if leaf 0 says it exists.
    let ebx = unsafe {
        if __cpuid(0).eax < 7 {
            return (false, false);
        }
        __cpuid_count(7, 0).ebx
    };
    (ebx & (1 << 23) != 0, ebx & (1 << 24) != 0)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> PersistMethod {
    match cpuid_flushes() {
        (_, true) => PersistMethod::Clwb,
        (true, false) => PersistMethod::ClflushOpt,
        // CLFLUSH is part of SSE2, which every x86-64 CPU has.
        (false, false) => PersistMethod::Clflush,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> PersistMethod {
    PersistMethod::Fence
}

impl Memory {
    /// What [`persist`](Self::persist) does for this memory: [`PersistMethod::Msync`] for a
    /// [`File`](MemoryKind::File) mapping without `MAP_SYNC` (its page cache must be written to
    /// the file), else the CPU's cache write-back ([`cpu_persist_method`]).
    #[must_use]
    pub fn persist_method(&self) -> PersistMethod {
        if self.kind() == MemoryKind::File && !self.is_map_sync() {
            PersistMethod::Msync
        } else {
            cpu_persist_method()
        }
    }

    /// Makes the stores to `offset..offset + len` durable, as libpmem's `pmem_persist`: the
    /// cache lines of the range are written back and fenced (`CLWB` or `CLFLUSHOPT` + `SFENCE`,
    /// else `CLFLUSH`; [`persist_method`](Self::persist_method)), or, for a file mapping with a
    /// page cache, its pages are `msync`ed. On a devdax device (or a `MAP_SYNC` file of a DAX
    /// file system) this is what makes a CPU store persistent; on DRAM it only writes the lines
    /// back (nothing there survives a power cut). A length of 0 does nothing.
    ///
    /// # Errors
    ///
    /// [`MemError::OutOfBounds`](crate::MemError::OutOfBounds) if the range is not inside
    /// (nothing is written back); [`MemError::Io`](crate::MemError::Io) (`op` "msync") if
    /// `msync` fails.
    pub fn persist(&self, offset: usize, len: usize) -> Result<()> {
        check_range(offset, len, self.len())?;
        if len == 0 {
            return Ok(());
        }
        match self.persist_method() {
            PersistMethod::Msync => self.flush(offset, len),
            m => {
                let start = self.as_ptr() as usize + offset;
                // SAFETY: [M7] [M4] `start..start + len` lies inside this memory's live bytes
                // (the range was checked above): the lines written back are the ones holding
                // them; `m` is the method the CPU supports.
                unsafe { write_back(m, start, len) };
                Ok(())
            }
        }
    }
}

/// Writes back the cache lines of `start..start + len` with `method`, then fences.
///
/// # Safety
///
/// [M7] The range is inside memory mapped in this process for as long as the call lasts, and
/// `method` is supported by the CPU ([`cpu_persist_method`] or an older method).
#[cfg(target_arch = "x86_64")]
unsafe fn write_back(method: PersistMethod, start: usize, len: usize) {
    use std::arch::asm;
    let mut line = start & !(LINE - 1);
    let end = start + len;
    match method {
        PersistMethod::Clwb => {
            while line < end {
                // SAFETY: [M7] `line` is in a cache line of the caller's mapped range; CLWB
                // changes no byte, only where the line's current value lives, and the CPU has it.
                unsafe { asm!("clwb [{}]", in(reg) line, options(nostack, preserves_flags)) };
                line += LINE;
            }
        }
        PersistMethod::ClflushOpt => {
            while line < end {
                // SAFETY: [M7] as above, CLFLUSHOPT (the CPU has it).
                unsafe { asm!("clflushopt [{}]", in(reg) line, options(nostack, preserves_flags)) };
                line += LINE;
            }
        }
        _ => {
            while line < end {
                // SAFETY: [M7] as above, CLFLUSH (SSE2, on every x86-64 CPU).
                unsafe { std::arch::x86_64::_mm_clflush(line as *const u8) };
                line += LINE;
            }
        }
    }
    // SAFETY: [M7] SFENCE orders the write-backs before later stores; it touches no memory.
    unsafe { std::arch::x86_64::_mm_sfence() };
}

/// A full fence (no cache write-back instruction on this architecture).
///
/// # Safety
///
/// None needed; `unsafe` only to match the x86-64 version.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn write_back(_method: PersistMethod, _start: usize, _len: usize) {
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persist_checks_the_range_and_writes_back() {
        let m = Memory::from_vec(vec![7u8; 4096]);
        m.persist(0, 4096).unwrap();
        m.persist(100, 1).unwrap();
        m.persist(4096, 0).unwrap();
        let e = m.persist(4000, 97).unwrap_err();
        assert!(matches!(e, crate::MemError::OutOfBounds { offset: 4000, len: 97, size: 4096 }), "{e:?}");
        assert!(m.persist(usize::MAX, 2).is_err());
        assert_eq!(m.to_vec(), vec![7u8; 4096], "a write-back changes no byte");
        assert_eq!(m.persist_method(), cpu_persist_method());
    }

    #[test]
    fn every_method_the_cpu_has_runs() {
        let m = Memory::from_vec((0..=255u8).cycle().take(8192).collect());
        let mut methods = vec![PersistMethod::Clflush];
        #[cfg(target_arch = "x86_64")]
        {
            let (clflushopt, clwb) = cpuid_flushes();
            if clflushopt {
                methods.push(PersistMethod::ClflushOpt);
            }
            if clwb {
                methods.push(PersistMethod::Clwb);
            }
        }
        for method in methods {
            // SAFETY: [M7] inside the live 8192 bytes of `m`; the method is one the CPU has.
            unsafe { write_back(method, m.as_ptr() as usize + 3, 8000) };
        }
        assert_eq!(m.to_vec(), (0..=255u8).cycle().take(8192).collect::<Vec<_>>());
    }

    #[test]
    fn a_file_mapping_without_map_sync_is_msynced() {
        let path = std::env::temp_dir().join(format!("rpma-mem-persist-{}", std::process::id()));
        let opts = crate::MapOptions::new().create(true).len(8192).map_sync(crate::MapSync::Never);
        // SAFETY: [M5] our own temporary file, truncated by nobody while mapped.
        let m = unsafe { opts.map(&path) }.unwrap();
        assert_eq!(m.persist_method(), PersistMethod::Msync);
        m.volatile().write(5000, b"durable").unwrap();
        m.persist(5000, 7).unwrap();
        assert_eq!(&std::fs::read(&path).unwrap()[5000..5007], b"durable");
        drop(m);
        let _ = std::fs::remove_file(&path);
        assert_eq!(PersistMethod::ClflushOpt.to_string(), "clflushopt");
    }
}
