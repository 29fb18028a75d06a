//! The errors of this crate, and the one bounds check every accessor uses (rule M4).

use std::path::PathBuf;

/// The result type of this crate.
pub type Result<T, E = MemError> = std::result::Result<T, E>;

/// What went wrong while allocating, mapping or accessing memory.
///
/// `Display` gives one sentence with the numbers that matter; `Debug` gives every field.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemError {
    /// The range `offset..offset + len` is not inside a slice or a memory of `size` bytes (or
    /// `offset + len` overflows).
    #[error("the range of {len} bytes at offset {offset} is out of bounds of {size} bytes")]
    OutOfBounds {
        /// Start of the range.
        offset: usize,
        /// Length of the range.
        len: usize,
        /// Size of the slice or memory the range was checked against.
        size: usize,
    },
    /// An allocation of `len` bytes failed, or `len` with its alignment does not fit a
    /// [`Layout`](std::alloc::Layout) (or a mapping length) without overflow.
    #[error("allocation of {len} bytes failed (out of memory, or the size overflows with its alignment)")]
    Alloc {
        /// The length that was asked for.
        len: usize,
    },
    /// Zero bytes were asked for; a memory handed to a NIC has at least one byte.
    #[error("zero-length memory was requested")]
    Empty,
    /// An alignment that is not a power of two, or a value (an offset, an address) that is not a
    /// multiple of a required alignment.
    #[error("bad alignment: {what} (value {value:#x}, alignment {align:#x})")]
    BadAlignment {
        /// What was checked, e.g. "the mapping offset is not a multiple of the page size".
        what: &'static str,
        /// The value that failed the check (the alignment itself when it is not a power of two).
        value: u64,
        /// The alignment asked for or required.
        align: usize,
    },
    /// A system call on a file failed.
    #[error("{op} of {} failed: {source}", path.display())]
    Io {
        /// The operation: "open", "fstat", "extend", "mmap", "msync", "read devdax size"...
        op: &'static str,
        /// The file (or the sysfs file) it was about.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The path names something that cannot be mapped as memory.
    #[error("{} cannot be mapped: it is {reason}", path.display())]
    NotMappable {
        /// The path given to [`MapOptions::map`](crate::MapOptions::map).
        path: PathBuf,
        /// What it is, e.g. "a directory" or "a FIFO".
        reason: &'static str,
    },
    /// The file is shorter than the mapped range needs and [`create`](crate::MapOptions::create)
    /// was not set (or the file is a devdax device, which cannot grow).
    #[error("{} is {size} bytes long but the mapping needs {needed} bytes", path.display())]
    TooShort {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The end of the range to map (`offset + len`).
        needed: u64,
    },
    /// [`MapSync::Required`](crate::MapSync::Required) was asked but the kernel or the file system
    /// refused `MAP_SYNC` (only DAX file systems and devdax devices support it).
    #[error("{} cannot be mapped with MAP_SYNC: the file system or the kernel does not support it", path.display())]
    MapSyncUnsupported {
        /// The file.
        path: PathBuf,
    },
    /// An anonymous huge-page mapping failed (usually: no huge pages reserved in
    /// `/proc/sys/vm/nr_hugepages`, or none left).
    #[error(
        "mapping {len} bytes of huge pages failed (are huge pages reserved in /proc/sys/vm/nr_hugepages?): {source}"
    )]
    HugePages {
        /// The length that was asked for (before rounding up to the huge page size).
        len: usize,
        /// The operating system's error.
        source: std::io::Error,
    },
}

impl MemError {
    /// The operating system's `errno` behind this error, where there is one: the error of the
    /// failed system call for [`Io`](Self::Io) and [`HugePages`](Self::HugePages), and
    /// `EOPNOTSUPP` (what `mmap(2)` documents) for [`MapSyncUnsupported`](Self::MapSyncUnsupported).
    pub fn errno(&self) -> Option<i32> {
        match self {
            Self::Io { source, .. } | Self::HugePages { source, .. } => source.raw_os_error(),
            Self::MapSyncUnsupported { .. } => Some(libc::EOPNOTSUPP),
            _ => None,
        }
    }
}

/// Checks that `offset..offset + len` lies inside `0..size` without overflow (rule M4) and
/// returns the end of the range.
#[inline]
pub(crate) fn check_range(offset: usize, len: usize, size: usize) -> Result<usize> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(end),
        _ => Err(MemError::OutOfBounds { offset, len, size }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_range_accepts_exactly_the_ranges_inside() {
        assert_eq!(check_range(0, 0, 0).unwrap(), 0);
        assert_eq!(check_range(10, 0, 10).unwrap(), 10);
        assert_eq!(check_range(2, 8, 10).unwrap(), 10);
        assert!(matches!(check_range(3, 8, 10), Err(MemError::OutOfBounds { offset: 3, len: 8, size: 10 })));
        assert!(matches!(check_range(11, 0, 10), Err(MemError::OutOfBounds { .. })));
        assert!(matches!(check_range(usize::MAX, 1, usize::MAX), Err(MemError::OutOfBounds { .. })));
        assert!(matches!(check_range(1, usize::MAX, usize::MAX), Err(MemError::OutOfBounds { .. })));
    }

    #[test]
    fn display_is_one_sentence_with_the_numbers() {
        let e = MemError::OutOfBounds { offset: 4, len: 8, size: 10 };
        assert_eq!(e.to_string(), "the range of 8 bytes at offset 4 is out of bounds of 10 bytes");
        let e = MemError::TooShort { path: "/x".into(), size: 1, needed: 4096 };
        assert_eq!(e.to_string(), "/x is 1 bytes long but the mapping needs 4096 bytes");
        let e = MemError::NotMappable { path: "/d".into(), reason: "a directory" };
        assert_eq!(e.to_string(), "/d cannot be mapped: it is a directory");
        let e = MemError::BadAlignment { what: "the alignment is not a power of two", value: 3, align: 3 };
        assert_eq!(e.to_string(), "bad alignment: the alignment is not a power of two (value 0x3, alignment 0x3)");
        assert_eq!(MemError::Empty.to_string(), "zero-length memory was requested");
    }

    #[test]
    fn errno_is_the_os_error_where_there_is_one() {
        let io = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(MemError::Io { op: "open", path: "/x".into(), source: io }.errno(), Some(libc::ENOENT));
        let io = std::io::Error::from_raw_os_error(libc::ENOMEM);
        assert_eq!(MemError::HugePages { len: 1, source: io }.errno(), Some(libc::ENOMEM));
        assert_eq!(MemError::MapSyncUnsupported { path: "/x".into() }.errno(), Some(libc::EOPNOTSUPP));
        assert_eq!(MemError::Empty.errno(), None);
        assert_eq!(MemError::Alloc { len: 1 }.errno(), None);
        let io = std::io::Error::other("not an os error");
        assert_eq!(MemError::Io { op: "open", path: "/x".into(), source: io }.errno(), None);
    }
}
