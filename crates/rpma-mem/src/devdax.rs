//! What sysfs tells about a devdax character device: whether it is one, its size, its alignment.
//! No unsafe code here.
//!
//! The kernel links `/sys/dev/char/MAJ:MIN` to the device's directory. For a devdax device:
//! - `subsystem` resolves to `.../bus/dax` (or `.../class/dax` with the old dax class);
//! - `size` is its size in bytes (decimal);
//! - `align` (since Linux 5.10) is the device's mapping alignment; older kernels only give the
//!   region's, as `dax_region/align` in an ancestor directory; 2 MiB, the usual alignment, is
//!   the fallback.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::{MemError, Result};

/// The alignment assumed when sysfs does not give one.
pub(crate) const DEFAULT_ALIGN: u64 = 2 << 20;

/// A devdax device's size and alignment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DevDax {
    pub(crate) size: u64,
    pub(crate) align: u64,
}

/// `/sys/dev/char/MAJ:MIN` under `sys` (normally `/sys`).
fn char_dev_dir(sys: &Path, rdev: u64) -> PathBuf {
    sys.join("dev/char").join(format!("{}:{}", libc::major(rdev), libc::minor(rdev)))
}

/// Whether the character device `rdev` is a devdax device.
pub(crate) fn is_devdax(sys: &Path, rdev: u64) -> bool {
    fs::canonicalize(char_dev_dir(sys, rdev).join("subsystem"))
        .map(|p| p.file_name().is_some_and(|n| n == "dax"))
        .unwrap_or(false)
}

/// The size and alignment of the devdax device `rdev`.
///
/// # Errors
///
/// [`MemError::Io`] (`op` "read devdax size") if the size cannot be read or parsed.
pub(crate) fn info(sys: &Path, rdev: u64) -> Result<DevDax> {
    let dir = char_dev_dir(sys, rdev);
    let size_path = dir.join("size");
    let size =
        read_number(&size_path).map_err(|source| MemError::Io { op: "read devdax size", path: size_path, source })?;
    Ok(DevDax { size, align: alignment(&dir) })
}

/// The device's alignment: its own `align`, the old class model's `device/align`, or the
/// `dax_region/align` of the nearest ancestor; [`DEFAULT_ALIGN`] if none is readable.
fn alignment(dir: &Path) -> u64 {
    let mut candidates = vec![dir.join("align"), dir.join("device/align")];
    if let Ok(real) = fs::canonicalize(dir) {
        candidates.extend(real.ancestors().skip(1).map(|a| a.join("dax_region/align")));
    }
    candidates.iter().filter_map(|p| read_number(p).ok()).find(|a| a.is_power_of_two()).unwrap_or(DEFAULT_ALIGN)
}

/// A number from a sysfs file: decimal, or hexadecimal with `0x`.
fn read_number(path: &Path) -> io::Result<u64> {
    let text = fs::read_to_string(path)?;
    let text = text.trim();
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {text:?}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A fake sysfs: one devdax device 250:3 (bus model, per-device align optional), one non-dax
    /// character device 1:3, one devdax device 250:4 with the old class model.
    struct FakeSys(PathBuf);

    impl FakeSys {
        fn new(name: &str, device_align: Option<&str>) -> Self {
            let root = std::env::temp_dir().join(format!("rpma-mem-sysfs-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&root);
            let region = root.join("devices/platform/e820_pmem/ndbus0/region0");
            let dev = region.join("dax0.0/dax0.0");
            fs::create_dir_all(&dev).unwrap();
            fs::create_dir_all(root.join("bus/dax")).unwrap();
            fs::create_dir_all(root.join("class/mem")).unwrap();
            fs::create_dir_all(root.join("dev/char")).unwrap();
            fs::create_dir_all(region.join("dax0.0/dax_region")).unwrap();
            fs::write(region.join("dax0.0/dax_region/align"), "1073741824\n").unwrap();
            fs::write(dev.join("size"), "4294967296\n").unwrap();
            if let Some(a) = device_align {
                fs::write(dev.join("align"), a).unwrap();
            }
            symlink("../../../../../../../bus/dax", dev.join("subsystem")).unwrap();
            symlink("../../devices/platform/e820_pmem/ndbus0/region0/dax0.0/dax0.0", root.join("dev/char/250:3"))
                .unwrap();
            let null = root.join("devices/virtual/mem/null");
            fs::create_dir_all(&null).unwrap();
            symlink("../../../../class/mem", null.join("subsystem")).unwrap();
            symlink("../../devices/virtual/mem/null", root.join("dev/char/1:3")).unwrap();
            // The old class model: no align of its own, the region's under device/.
            let old = root.join("devices/old/dax1.0");
            fs::create_dir_all(old.join("dev")).unwrap();
            fs::create_dir_all(root.join("class/dax")).unwrap();
            fs::write(old.join("dev/size"), "0x40000000").unwrap();
            fs::write(old.join("align"), "4096\n").unwrap();
            symlink("../../../../class/dax", old.join("dev/subsystem")).unwrap();
            symlink("..", old.join("dev/device")).unwrap();
            symlink("../../devices/old/dax1.0/dev", root.join("dev/char/250:4")).unwrap();
            Self(root)
        }
    }

    impl Drop for FakeSys {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn recognizes_devdax_by_its_subsystem() {
        let sys = FakeSys::new("subsystem", None);
        assert!(is_devdax(&sys.0, libc::makedev(250, 3)));
        assert!(is_devdax(&sys.0, libc::makedev(250, 4)));
        assert!(!is_devdax(&sys.0, libc::makedev(1, 3)));
        assert!(!is_devdax(&sys.0, libc::makedev(9, 9)), "a device sysfs does not know");
    }

    #[test]
    fn reads_size_and_the_device_alignment_first() {
        let sys = FakeSys::new("device-align", Some("2097152\n"));
        let dax = info(&sys.0, libc::makedev(250, 3)).unwrap();
        assert_eq!(dax, DevDax { size: 4 << 30, align: 2 << 20 });
    }

    #[test]
    fn falls_back_to_the_region_alignment_then_to_2_mib() {
        let sys = FakeSys::new("region-align", None);
        assert_eq!(info(&sys.0, libc::makedev(250, 3)).unwrap().align, 1 << 30);
        let sys = FakeSys::new("bad-align", Some("3\n"));
        assert_eq!(info(&sys.0, libc::makedev(250, 3)).unwrap().align, 1 << 30, "3 is no alignment");
        fs::remove_file(sys.0.join("devices/platform/e820_pmem/ndbus0/region0/dax0.0/dax_region/align")).unwrap();
        assert_eq!(info(&sys.0, libc::makedev(250, 3)).unwrap().align, DEFAULT_ALIGN);
    }

    #[test]
    fn old_class_model_gives_device_align_and_hex_size() {
        let sys = FakeSys::new("class", None);
        assert_eq!(info(&sys.0, libc::makedev(250, 4)).unwrap(), DevDax { size: 1 << 30, align: 4096 });
    }

    #[test]
    fn missing_or_bad_size_is_an_io_error() {
        let sys = FakeSys::new("size", None);
        let err = info(&sys.0, libc::makedev(9, 9)).unwrap_err();
        assert!(matches!(&err, MemError::Io { op: "read devdax size", .. }), "{err:?}");
        assert_eq!(err.errno(), Some(libc::ENOENT));
        fs::write(sys.0.join("devices/platform/e820_pmem/ndbus0/region0/dax0.0/dax0.0/size"), "lots\n").unwrap();
        let err = info(&sys.0, libc::makedev(250, 3)).unwrap_err();
        assert!(matches!(&err, MemError::Io { source, .. } if source.kind() == io::ErrorKind::InvalidData), "{err:?}");
    }
}
