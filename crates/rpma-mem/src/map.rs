//! [`MapOptions`]: mapping a file or a devdax device as [`Memory`] (rule M5).

use std::fs::{self, File, Metadata, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::ptr::{self, NonNull};

use crate::devdax;
use crate::error::{MemError, Result};
use crate::memory::{Memory, MemoryKind};
use crate::owner::{Mapping, Owner};
use crate::sys;

/// Whether to map with `MAP_SYNC`, which makes a file's metadata durable at page-fault time, so
/// that flushing CPU caches is enough to make writes durable (only DAX file systems and devdax
/// devices support it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MapSync {
    /// Try `MAP_SYNC`; map without it if the kernel or the file system refuses.
    #[default]
    IfSupported,
    /// `MAP_SYNC` or [`MemError::MapSyncUnsupported`].
    Required,
    /// Never ask for `MAP_SYNC`.
    Never,
}

/// How to map a regular file or a devdax character device (a builder taken by value).
///
/// ```no_run
/// use rpma::mem::{MapOptions, MapSync};
///
/// let opts = MapOptions::new().create(true).len(1 << 20).map_sync(MapSync::IfSupported);
/// // SAFETY: [M5] nobody truncates /tmp/pool while it is mapped.
/// let mem = unsafe { opts.map("/tmp/pool") }?;
/// mem.volatile().write(0, b"hello")?;
/// mem.flush(0, 5)?;
/// # Ok::<(), rpma::mem::MemError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct MapOptions {
    create: bool,
    offset: u64,
    len: Option<usize>,
    map_sync: MapSync,
}

impl MapOptions {
    /// Map an existing file from offset 0 to its end, with [`MapSync::IfSupported`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Create the file if it is missing, and extend it with zeros to `offset + len` if it is
    /// shorter (regular files only: a devdax device has a fixed size). Extending only ever
    /// lengthens the file, even if another process lengthened it meanwhile. Extending needs an
    /// explicit [`len`](Self::len): without one, a created file is empty and mapping it gives
    /// [`MemError::Empty`].
    pub fn create(mut self, yes: bool) -> Self {
        self.create = yes;
        self
    }

    /// Map from this byte of the file: a multiple of the page size for a regular file, or of the
    /// device's alignment for a devdax device.
    pub fn offset(mut self, offset: u64) -> Self {
        self.offset = offset;
        self
    }

    /// Map this many bytes (instead of the rest of the file from the offset).
    pub fn len(mut self, len: usize) -> Self {
        self.len = Some(len);
        self
    }

    /// Whether to use `MAP_SYNC`.
    pub fn map_sync(mut self, mode: MapSync) -> Self {
        self.map_sync = mode;
        self
    }

    /// Opens `path` (read and write, close-on-exec) and maps the range as a shared mapping: a
    /// [`File`](MemoryKind::File) memory for a regular file, a [`DevDax`](MemoryKind::DevDax)
    /// memory for a devdax device (whose size comes from sysfs). The file descriptor is closed
    /// before returning; the mapping lives until the `Memory` is dropped (`msync` then `munmap`
    /// for a file). A devdax mapping is rounded up to the device's alignment internally.
    ///
    /// # Safety
    ///
    /// - Rule M5: nobody (this process or another) truncates the file, nor otherwise invalidates
    ///   the mapped range, while the `Memory` exists; accessing a truncated page raises SIGBUS.
    /// - Rule M3: nobody else (another process through the file or a mapping, a device) writes
    ///   the range while a slice from [`Memory::as_slice`]/[`Memory::as_mut_slice`] lives.
    ///   Changes by others at any other time are the M2 model and need nothing.
    ///
    /// # Errors
    ///
    /// - [`MemError::Empty`]: `len` is 0, or the file is empty from `offset` on.
    /// - [`MemError::NotMappable`]: a directory, a FIFO, a socket, a block device, or a
    ///   character device that is not a devdax device.
    /// - [`MemError::BadAlignment`]: `offset` is not a multiple of the page size (or of the
    ///   devdax alignment).
    /// - [`MemError::TooShort`]: the file is shorter than `offset + len` and `create` is not set
    ///   (always for a devdax device).
    /// - [`MemError::MapSyncUnsupported`]: [`MapSync::Required`] and the kernel refused it.
    /// - [`MemError::Io`]: `open` (e.g. `ENOENT` for a missing file without `create`), `fstat`,
    ///   extending the file, reading the devdax size from sysfs, or `mmap` failed.
    /// - [`MemError::Alloc`]: the length does not fit a `usize`, or rounding it overflows.
    pub unsafe fn map(&self, path: impl AsRef<Path>) -> Result<Memory> {
        // SAFETY: [M5] the caller's promises are forwarded unchanged.
        unsafe { self.map_with_sysfs(path.as_ref(), Path::new("/sys")) }
    }

    /// [`map`](Self::map), with sysfs at `sys`.
    ///
    /// # Safety
    ///
    /// As [`map`](Self::map).
    unsafe fn map_with_sysfs(&self, path: &Path, sys: &Path) -> Result<Memory> {
        if self.len == Some(0) {
            return Err(MemError::Empty);
        }
        // Refuse what must not even be opened (opening a FIFO, a tty or a tape may block or act
        // on the device; a socket fails with ENXIO); the open file is checked again below.
        if let Ok(meta) = fs::metadata(path) {
            classify(path, &meta, sys)?;
        }
        let io_err = |op| move |source| MemError::Io { op, path: path.to_path_buf(), source };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(self.create)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(io_err("open"))?;
        let meta = file.metadata().map_err(io_err("fstat"))?;
        let range = match classify(path, &meta, sys)? {
            Target::File => self.file_range(path, &file, meta.len())?,
            Target::DevDax(rdev) => self.devdax_range(path, devdax::info(sys, rdev)?)?,
        };
        let offset = libc::off_t::try_from(self.offset).map_err(|_| MemError::TooShort {
            path: path.to_path_buf(),
            size: meta.len(),
            needed: self.offset,
        })?;
        let (addr, map_sync) = match self.map_sync {
            MapSync::Never => (mmap(&file, range.map_len, offset, libc::MAP_SHARED).map_err(io_err("mmap"))?, false),
            MapSync::IfSupported | MapSync::Required => {
                match mmap(&file, range.map_len, offset, libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC) {
                    Ok(addr) => (addr, true),
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => {
                        if self.map_sync == MapSync::Required {
                            return Err(MemError::MapSyncUnsupported { path: path.to_path_buf() });
                        }
                        (mmap(&file, range.map_len, offset, libc::MAP_SHARED).map_err(io_err("mmap"))?, false)
                    }
                    Err(e) => return Err(io_err("mmap")(e)),
                }
            }
        };
        let owner = Owner::Mapping(Mapping { map_len: range.map_len, path: path.to_path_buf() });
        // SAFETY: [M1] [M5] a fresh shared mapping of map_len >= len bytes (map_len <= isize::MAX
        // or mmap would have failed), readable and writable, inside the file (checked against its
        // size), owned by nothing else; Owner::Mapping unmaps it. The caller promised M5.
        Ok(unsafe { Memory::from_owner(addr, range.len, range.kind, map_sync, owner) })
    }

    /// The range to map in a regular file of `size` bytes, extending the file if asked.
    fn file_range(&self, path: &Path, file: &File, size: u64) -> Result<Range> {
        let page = sys::page_size();
        if self.offset % page as u64 != 0 {
            return Err(MemError::BadAlignment {
                what: "the mapping offset is not a multiple of the page size",
                value: self.offset,
                align: page,
            });
        }
        let len = self.len_within(path, size)?;
        let needed = self.offset.saturating_add(len as u64);
        if size < needed {
            if !self.create {
                return Err(MemError::TooShort { path: path.to_path_buf(), size, needed });
            }
            extend(file, needed).map_err(|source| MemError::Io { op: "extend", path: path.to_path_buf(), source })?;
        }
        Ok(Range { len, map_len: len, kind: MemoryKind::File })
    }

    /// The range to map in a devdax device, whose mappings must start and end on its alignment.
    fn devdax_range(&self, path: &Path, dax: devdax::DevDax) -> Result<Range> {
        if self.offset % dax.align != 0 {
            return Err(MemError::BadAlignment {
                what: "the mapping offset is not a multiple of the devdax alignment",
                value: self.offset,
                align: usize::try_from(dax.align).unwrap_or(usize::MAX),
            });
        }
        let len = self.len_within(path, dax.size)?;
        let needed = self.offset.saturating_add(len as u64);
        if dax.size < needed {
            return Err(MemError::TooShort { path: path.to_path_buf(), size: dax.size, needed });
        }
        let align = usize::try_from(dax.align).map_err(|_| MemError::Alloc { len })?;
        let rest = usize::try_from(dax.size - self.offset).unwrap_or(usize::MAX);
        let map_len = sys::round_up(len, align).ok_or(MemError::Alloc { len })?.min(rest);
        Ok(Range { len, map_len, kind: MemoryKind::DevDax })
    }

    /// The length asked, or the rest of a file of `size` bytes from the offset.
    fn len_within(&self, path: &Path, size: u64) -> Result<usize> {
        if let Some(len) = self.len {
            return Ok(len);
        }
        let rest = size.checked_sub(self.offset).ok_or_else(|| MemError::TooShort {
            path: path.to_path_buf(),
            size,
            needed: self.offset,
        })?;
        match usize::try_from(rest) {
            Ok(0) => Err(MemError::Empty),
            Ok(len) => Ok(len),
            Err(_) => Err(MemError::Alloc { len: usize::MAX }),
        }
    }
}

/// What a path names, once found mappable.
enum Target {
    File,
    DevDax(u64),
}

/// A range to map: `len` bytes reported, `map_len` bytes mapped.
struct Range {
    len: usize,
    map_len: usize,
    kind: MemoryKind,
}

/// Sorts what `meta` describes into mappable targets and [`MemError::NotMappable`] reasons.
fn classify(path: &Path, meta: &Metadata, sys: &Path) -> Result<Target> {
    let ft = meta.file_type();
    let reason = if ft.is_file() {
        return Ok(Target::File);
    } else if ft.is_char_device() {
        if devdax::is_devdax(sys, meta.rdev()) {
            return Ok(Target::DevDax(meta.rdev()));
        }
        "a character device that is not a devdax device"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_block_device() {
        "a block device (map a file of a DAX file system on it, or a devdax device)"
    } else {
        "not a regular file"
    };
    Err(MemError::NotMappable { path: path.to_path_buf(), reason })
}

/// Lengthens `file` to at least `len` bytes and never shortens it, whatever its length is when
/// the call reaches the kernel (another process may have lengthened it since it was looked at,
/// and setting the length would cut its mapped pages off, M5): `fallocate` of the last byte (no
/// byte already there changes), or, where the file system has no `fallocate`, a zero byte written
/// there.
fn extend(file: &File, len: u64) -> io::Result<()> {
    let Some(last) = len.checked_sub(1) else {
        return Ok(());
    };
    // No file is longer than off_t allows: say so as the kernel would.
    let at = libc::off_t::try_from(last).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    loop {
        // SAFETY: [M5] fallocate on an open descriptor reads and writes no memory of this
        // process; mode 0 allocates and lengthens, it never shortens the file (no mapping of it
        // loses a page).
        if unsafe { libc::fallocate(file.as_raw_fd(), 0, at, 1) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) => return file.write_all_at(&[0], last),
            _ => return Err(e),
        }
    }
}

/// `mmap(NULL, len, PROT_READ | PROT_WRITE, flags, file, offset)`.
fn mmap(file: &File, len: usize, offset: libc::off_t, flags: libc::c_int) -> io::Result<NonNull<u8>> {
    // SAFETY: [M5] a new mapping at an address the kernel chooses (NULL hint, no MAP_FIXED)
    // replaces no existing memory; file is an open descriptor; the result is checked.
    let addr = unsafe {
        libc::mmap(ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, file.as_raw_fd(), offset)
    };
    if addr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(addr.cast::<u8>()).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What another process's stale look at the length would do: extending to less than the
    /// file's length leaves the file, and its bytes, as they are.
    #[test]
    fn extending_never_shortens_nor_changes_bytes() {
        let path = std::env::temp_dir().join(format!("rpma-mem-extend-{}", std::process::id()));
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        extend(&file, 8192).unwrap();
        assert_eq!(file.metadata().unwrap().len(), 8192);
        file.write_all_at(b"kept", 8188).unwrap();
        for len in [0, 1, 4096, 8192] {
            extend(&file, len).unwrap();
        }
        assert_eq!(file.metadata().unwrap().len(), 8192);
        let mut b = [0u8; 4];
        file.read_exact_at(&mut b, 8188).unwrap();
        assert_eq!(&b, b"kept");
        assert_eq!(extend(&file, u64::MAX).unwrap_err().raw_os_error(), Some(libc::EFBIG));
        fs::remove_file(&path).unwrap();
    }
}
