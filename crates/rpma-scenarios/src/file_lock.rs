//! A side's range of its `--file`: the open file description lock that makes it this side's
//! (`F_OFD_SETLK`), who holds it when it is taken, and extending the file without ever
//! shortening it.
//!
//! The order is what keeps rule M5 of `docs/memory.md` for every `rpma` sharing a file: a side
//! locks its range first and only then reads the file's length and extends it. A side refused
//! the lock has changed nothing; a side holding it extends from the length the file has now, and
//! extending never shortens the file, so a side on another range of the file (locked by it, not
//! by this one) never finds its mapped pages cut off.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use anyhow::{bail, Context, Result};
use nix::errno::Errno;
use nix::fcntl::{fallocate, fcntl, FallocateFlags, FcntlArg};
use nix::libc;

/// The `struct flock` of a write lock on `[offset, offset + len)`.
fn write_lock(offset: u64, len: usize) -> libc::flock {
    libc::flock {
        l_type: libc::F_WRLCK as i16,
        l_whence: libc::SEEK_SET as i16,
        l_start: i64::try_from(offset).unwrap_or(i64::MAX),
        l_len: i64::try_from(len).unwrap_or(i64::MAX),
        l_pid: 0,
    }
}

/// Takes a write lock on `[offset, offset + len)` of the file (an open file description lock,
/// `F_OFD_SETLK`, held until the file is closed): two sides on one range of a file or devdax
/// device would overwrite each other's memory, and one would size the file under the other.
///
/// # Errors
/// If another process (or another open of this one) holds a lock on part of the range: the
/// message names the file, the range and the holder where it can be found.
pub(super) fn lock_range(f: &File, path: &Path, offset: u64, len: usize) -> Result<()> {
    let end = offset.saturating_add(len as u64);
    match fcntl(f.as_raw_fd(), FcntlArg::F_OFD_SETLK(&write_lock(offset, len))) {
        Ok(_) => Ok(()),
        Err(Errno::EAGAIN | Errno::EACCES) => bail!(
            "{}: bytes {offset}..{end} are in use by {}, which holds a lock on them; the file was left as it \
             was and nothing was registered",
            path.display(),
            holder(f, offset, len)
        ),
        Err(e) => Err(e).with_context(|| format!("locking bytes {offset}..{end} of {}", path.display())),
    }
}

/// Who holds a lock conflicting with a write lock on `[offset, offset + len)`: "process PID
/// (NAME)", else "another process" (a holder of another user, or one gone meanwhile).
///
/// A classic POSIX lock names its process (`F_OFD_GETLK`); an open file description lock has no
/// process (the kernel reports -1), so the processes' `/proc/PID/fdinfo` are searched for the
/// open file holding it, as `lslocks` does.
fn holder(f: &File, offset: u64, len: usize) -> String {
    let mut probe = write_lock(offset, len);
    if fcntl(f.as_raw_fd(), FcntlArg::F_OFD_GETLK(&mut probe)).is_err() || probe.l_type == libc::F_UNLCK as i16 {
        return "another process".to_owned();
    }
    let pid = if probe.l_pid > 0 {
        Some(probe.l_pid.unsigned_abs())
    } else {
        let start = u64::try_from(probe.l_start).unwrap_or(0);
        let end = match u64::try_from(probe.l_len) {
            Ok(0) | Err(_) => u64::MAX,
            Ok(n) => start.saturating_add(n - 1),
        };
        f.metadata().ok().and_then(|m| ofd_lock_holder(m.dev(), m.ino(), start, end))
    };
    match pid {
        Some(pid) => {
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            match name.trim() {
                "" => format!("process {pid}"),
                name => format!("process {pid} ({name})"),
            }
        }
        None => "another process".to_owned(),
    }
}

/// The process with an open file holding a lock on bytes `start..=end` of the file `dev`/`ino`
/// (a `lock:` line of its `/proc/PID/fdinfo/FD`, the descriptor checked to be that file).
fn ofd_lock_holder(dev: u64, ino: u64, start: u64, end: u64) -> Option<u32> {
    for proc_entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = proc_entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(proc_entry.path().join("fdinfo")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(info) = std::fs::read_to_string(fd.path()) else {
                continue;
            };
            if !info.lines().any(|l| holds_lock(l, ino, start, end)) {
                continue;
            }
            // The fdinfo names the inode and the device of its superblock, which is not always the
            // device stat reports (btrfs): the descriptor itself is the file, or not.
            let same = std::fs::metadata(proc_entry.path().join("fd").join(fd.file_name()))
                .is_ok_and(|m| m.dev() == dev && m.ino() == ino);
            if same {
                return Some(pid);
            }
        }
    }
    None
}

/// Whether a line of fdinfo is a lock held (not waited for) on inode `ino` that overlaps
/// `start..=end`: `lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:1234 0 4095` (the last bytes `EOF`
/// for a lock to the end of the file and beyond).
fn holds_lock(line: &str, ino: u64, start: u64, end: u64) -> bool {
    let Some(rest) = line.strip_prefix("lock:") else {
        return false;
    };
    if rest.contains("->") {
        return false;
    }
    let words: Vec<&str> = rest.split_whitespace().collect();
    let Some(at) = words.iter().position(|w| w.rsplit(':').next().and_then(|i| i.parse::<u64>().ok()) == Some(ino))
    else {
        return false;
    };
    let (Some(s), Some(e)) = (words.get(at + 1), words.get(at + 2)) else {
        return false;
    };
    let Ok(s) = s.parse::<u64>() else {
        return false;
    };
    let e = if *e == "EOF" { u64::MAX } else { e.parse::<u64>().unwrap_or(u64::MAX) };
    s <= end && start <= e
}

/// Extends the file to at least `end` bytes, never shortening it, whatever its length is when
/// the call reaches the kernel: `fallocate` of its last byte (the file's length only grows, and
/// no byte that is already there changes), or, where the file system has no `fallocate`, a zero
/// byte written there (a byte of this side's locked range, which was beyond the end of the file
/// when its length was read: nobody else wrote it).
///
/// # Errors
/// If neither can be done (no space, a file too large).
pub(super) fn extend(f: &File, path: &Path, end: u64) -> Result<()> {
    let Some(last) = end.checked_sub(1) else {
        return Ok(());
    };
    let result = match i64::try_from(last) {
        Ok(at) => match fallocate(f.as_raw_fd(), FallocateFlags::empty(), at, 1) {
            Err(Errno::EOPNOTSUPP) => f.write_all_at(&[0], last),
            r => r.map_err(std::io::Error::from),
        },
        Err(_) => Err(std::io::Error::from_raw_os_error(libc::EFBIG)),
    };
    result.with_context(|| format!("extending {} to {end} bytes", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_lock_lines() {
        let l = "lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:1234 4096 8191";
        assert!(holds_lock(l, 1234, 0, 4096));
        assert!(holds_lock(l, 1234, 8191, 9000));
        assert!(!holds_lock(l, 1234, 0, 4095));
        assert!(!holds_lock(l, 1234, 8192, 9000));
        assert!(!holds_lock(l, 1235, 4096, 8191));
        assert!(holds_lock("lock:\t1: POSIX  ADVISORY  WRITE 77 08:01:1234 0 EOF", 1234, 1 << 40, 1 << 41));
        assert!(!holds_lock("lock:\t1: -> OFDLCK ADVISORY  WRITE -1 fe:00:1234 0 EOF", 1234, 0, 1));
        assert!(!holds_lock("flags:\t02100002", 1234, 0, 1));
    }

    #[test]
    fn extending_never_shortens_and_keeps_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).unwrap();
        extend(&f, &path, 8192).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 8192);
        f.write_all_at(b"kept", 8188).unwrap();
        extend(&f, &path, 4096).unwrap();
        extend(&f, &path, 8192).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 8192);
        let mut b = [0u8; 4];
        f.read_exact_at(&mut b, 8188).unwrap();
        assert_eq!(&b, b"kept");
        extend(&f, &path, 0).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 8192);
    }

    #[test]
    fn the_holder_of_a_lock_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, [0u8; 4096]).unwrap();
        let mine = File::options().read(true).write(true).open(&path).unwrap();
        lock_range(&mine, &path, 0, 4096).unwrap();
        // Another open file description of this process: refused, and this process named.
        let other = File::options().read(true).write(true).open(&path).unwrap();
        let err = lock_range(&other, &path, 2048, 4096).unwrap_err().to_string();
        let me = format!("in use by process {}", std::process::id());
        assert!(err.contains(&me) && err.contains(&path.display().to_string()), "{err}");
        // A range beside it is free.
        lock_range(&other, &path, 4096, 4096).unwrap();
    }
}
