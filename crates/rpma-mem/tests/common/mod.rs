//! Helpers shared by the integration tests: temporary directories and mount facts.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A directory removed (with its contents) when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new empty directory under `base`, named after `name`, the process and a counter.
    pub fn new_in(base: &Path, name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("rpma-mem-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        Self(dir)
    }

    /// A new empty directory under the system's temporary directory.
    pub fn new(name: &str) -> Self {
        Self::new_in(&std::env::temp_dir(), name)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The file system type and mount options of the mount holding `path` (from
/// /proc/self/mounts, the longest mount point that is a prefix of the canonical path).
pub fn mount_of(path: &Path) -> (String, String) {
    let path = std::fs::canonicalize(path).expect("canonical path");
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("/proc/self/mounts");
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4 && path.starts_with(f[1])).then(|| (f[1].len(), f[2].to_string(), f[3].to_string()))
        })
        .max_by_key(|(len, _, _)| *len)
        .map(|(_, fs, opts)| (fs, opts))
        .expect("a mount holds every path")
}

/// A directory on tmpfs, if the machine has /dev/shm mounted as tmpfs.
pub fn tmpfs_dir() -> Option<PathBuf> {
    let shm = Path::new("/dev/shm");
    (shm.is_dir() && mount_of(shm).0 == "tmpfs").then(|| shm.to_path_buf())
}
