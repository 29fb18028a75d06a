//! MapOptions::map on regular files, and what it refuses to map.

mod common;

use std::fs;
use std::path::Path;

use common::{mount_of, tmpfs_dir, TempDir};
use rpma_mem::{page_size, MapOptions, MapSync, MemError, Memory, MemoryKind};

/// Maps `path` with `opts`.
fn map(opts: &MapOptions, path: &Path) -> Result<Memory, MemError> {
    // SAFETY: [M5] the test's own files, in its own directory, are never truncated while mapped.
    unsafe { opts.map(path) }
}

/// `len` bytes of a recognizable pattern.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

fn not_mappable(r: Result<Memory, MemError>, path: &Path, why: &str) {
    match r {
        Err(MemError::NotMappable { path: p, reason }) => {
            assert_eq!(p, path);
            assert!(reason.contains(why), "reason {reason:?} should mention {why:?}");
        }
        other => panic!("{}: expected NotMappable ({why}), got {other:?}", path.display()),
    }
}

#[test]
fn maps_an_existing_file_whole() {
    let dir = TempDir::new("whole");
    let path = dir.join("f");
    let len = 3 * page_size() + 100;
    fs::write(&path, pattern(len)).unwrap();
    let mem = map(&MapOptions::new(), &path).unwrap();
    assert_eq!((mem.len(), mem.kind()), (len, MemoryKind::File));
    assert_eq!(mem.as_ptr() as usize % page_size(), 0);
    assert_eq!(mem.to_vec(), pattern(len));
    assert!(format!("{mem:?}").contains("kind: File"));
    let mem = mem.into_vec().expect_err("a mapping is no Vec");
    assert_eq!(mem.kind(), MemoryKind::File);
}

#[test]
fn writes_reach_the_file_after_flush_and_after_drop() {
    let dir = TempDir::new("persist");
    let path = dir.join("f");
    let len = 2 * page_size();
    fs::write(&path, vec![0u8; len]).unwrap();
    let mem = map(&MapOptions::new(), &path).unwrap();
    mem.volatile().write(page_size() + 3, b"flushed").unwrap();
    mem.flush(page_size() + 3, 7).unwrap();
    assert_eq!(&fs::read(&path).unwrap()[page_size() + 3..page_size() + 10], b"flushed");
    mem.volatile().write(10, b"dropped").unwrap();
    drop(mem);
    let bytes = fs::read(&path).unwrap();
    assert_eq!((&bytes[10..17], bytes.len()), (&b"dropped"[..], len));
}

#[test]
fn flush_is_bounds_checked_and_rounds_to_pages() {
    let dir = TempDir::new("flush");
    let path = dir.join("f");
    fs::write(&path, vec![1u8; 5000]).unwrap();
    let mem = map(&MapOptions::new(), &path).unwrap();
    for (offset, len) in [(0, 5000), (4097, 3), (4999, 1), (5000, 0), (1, 4999)] {
        mem.flush(offset, len).unwrap_or_else(|e| panic!("flush({offset}, {len}): {e}"));
    }
    for (offset, len) in [(0, 5001), (5001, 0), (usize::MAX, 1), (4096, usize::MAX)] {
        assert!(matches!(mem.flush(offset, len), Err(MemError::OutOfBounds { size: 5000, .. })), "{offset} {len}");
    }
}

#[test]
fn two_mappings_of_one_file_share_their_bytes() {
    let dir = TempDir::new("shared");
    let path = dir.join("f");
    fs::write(&path, vec![0u8; 4096]).unwrap();
    let a = map(&MapOptions::new(), &path).unwrap();
    let b = map(&MapOptions::new(), &path).unwrap();
    assert_ne!(a.as_ptr(), b.as_ptr());
    a.volatile().store_u64(64, 0xDEAD_BEEF, std::sync::atomic::Ordering::Release).unwrap();
    assert_eq!(b.volatile().load_u64(64, std::sync::atomic::Ordering::Acquire).unwrap(), 0xDEAD_BEEF);
}

#[test]
fn create_makes_a_missing_file_of_the_asked_length() {
    let dir = TempDir::new("create");
    let path = dir.join("new");
    let mem = map(&MapOptions::new().create(true).len(10_000), &path).unwrap();
    assert_eq!((mem.len(), mem.kind()), (10_000, MemoryKind::File));
    assert_eq!(fs::metadata(&path).unwrap().len(), 10_000);
    assert!(mem.to_vec().iter().all(|&b| b == 0));
    mem.volatile().write(9_990, b"0123456789").unwrap();
    drop(mem);
    assert_eq!(&fs::read(&path).unwrap()[9_990..], b"0123456789");
}

#[test]
fn create_extends_a_short_file_and_keeps_its_bytes() {
    let dir = TempDir::new("extend");
    let path = dir.join("short");
    fs::write(&path, b"keep me").unwrap();
    let mem = map(&MapOptions::new().create(true).len(8192), &path).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().len(), 8192);
    assert_eq!(&mem.to_vec()[..8], b"keep me\0");
    drop(mem);
    // With an offset: extended to offset + len.
    let mem = map(&MapOptions::new().create(true).offset(2 * page_size() as u64).len(100), &path).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().len(), 2 * page_size() as u64 + 100);
    assert_eq!(mem.len(), 100);
    // A long enough file is not shrunk.
    drop(mem);
    map(&MapOptions::new().create(true).len(10), &path).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().len(), 2 * page_size() as u64 + 100);
}

#[test]
fn offset_maps_from_that_page() {
    let dir = TempDir::new("offset");
    let path = dir.join("f");
    let page = page_size();
    fs::write(&path, pattern(3 * page)).unwrap();
    let mem = map(&MapOptions::new().offset(page as u64).len(page), &path).unwrap();
    assert_eq!(mem.to_vec(), pattern(3 * page)[page..2 * page]);
    mem.volatile().write(0, b"second page").unwrap();
    drop(mem);
    assert_eq!(&fs::read(&path).unwrap()[page..page + 11], b"second page");
    // Without a length: the rest of the file.
    let mem = map(&MapOptions::new().offset(2 * page as u64), &path).unwrap();
    assert_eq!(mem.to_vec(), pattern(3 * page)[2 * page..]);
}

#[test]
fn offset_must_be_a_multiple_of_the_page_size() {
    let dir = TempDir::new("badoffset");
    let path = dir.join("f");
    fs::write(&path, vec![0u8; 3 * page_size()]).unwrap();
    for offset in [1, 100, page_size() as u64 + 512] {
        match map(&MapOptions::new().offset(offset).len(10), &path) {
            Err(MemError::BadAlignment { value, align, .. }) => assert_eq!((value, align), (offset, page_size())),
            other => panic!("offset {offset}: {other:?}"),
        }
    }
}

#[test]
fn too_short_files_are_refused_without_create() {
    let dir = TempDir::new("short");
    let path = dir.join("f");
    fs::write(&path, [0u8; 100]).unwrap();
    match map(&MapOptions::new().len(4096), &path) {
        Err(MemError::TooShort { path: p, size: 100, needed: 4096 }) => assert_eq!(p, path),
        other => panic!("{other:?}"),
    }
    let page = page_size() as u64;
    assert!(matches!(
        map(&MapOptions::new().offset(page).len(1), &path),
        Err(MemError::TooShort { size: 100, needed, .. }) if needed == page + 1
    ));
    assert!(
        matches!(map(&MapOptions::new().offset(page), &path), Err(MemError::TooShort { needed, .. }) if needed == page)
    );
    assert_eq!(fs::metadata(&path).unwrap().len(), 100, "the file was not touched");
    // A length no file can have: too short without create, and the kernel refuses to extend.
    assert!(matches!(map(&MapOptions::new().len(usize::MAX), &path), Err(MemError::TooShort { .. })));
    let err = map(&MapOptions::new().create(true).len(usize::MAX), &path).unwrap_err();
    assert!(matches!(err, MemError::Io { op: "extend", .. }), "{err:?}");
    assert_eq!(err.errno(), Some(libc::EFBIG));
    assert_eq!(fs::metadata(&path).unwrap().len(), 100);
}

#[test]
fn empty_ranges_are_refused() {
    let dir = TempDir::new("empty");
    let path = dir.join("f");
    fs::write(&path, []).unwrap();
    assert!(matches!(map(&MapOptions::new(), &path), Err(MemError::Empty)));
    assert!(matches!(map(&MapOptions::new().len(0), &path), Err(MemError::Empty)));
    fs::write(&path, vec![0u8; page_size()]).unwrap();
    assert!(matches!(map(&MapOptions::new().offset(page_size() as u64), &path), Err(MemError::Empty)));
    assert!(matches!(map(&MapOptions::new().len(0).create(true), &dir.join("never")), Err(MemError::Empty)));
    assert!(!dir.join("never").exists(), "a zero length is refused before anything is created");
    // create without a length creates the file but cannot size it.
    assert!(matches!(map(&MapOptions::new().create(true), &dir.join("created")), Err(MemError::Empty)));
}

#[test]
fn a_missing_file_is_an_open_error_with_enoent() {
    let dir = TempDir::new("missing");
    let path = dir.join("nope");
    let err = map(&MapOptions::new().len(10), &path).unwrap_err();
    assert!(matches!(&err, MemError::Io { op: "open", path: p, .. } if *p == path), "{err:?}");
    assert_eq!(err.errno(), Some(libc::ENOENT));
    assert!(err.to_string().starts_with("open of "), "{err}");
}

#[test]
fn directories_fifos_and_sockets_are_not_mappable() {
    let dir = TempDir::new("kinds");
    not_mappable(map(&MapOptions::new(), dir.path()), dir.path(), "directory");
    not_mappable(map(&MapOptions::new().create(true).len(10), dir.path()), dir.path(), "directory");
    let fifo = dir.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    // Must return at once: a FIFO is refused before it is opened.
    not_mappable(map(&MapOptions::new().len(10), &fifo), &fifo, "FIFO");
    let sock = dir.join("sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    not_mappable(map(&MapOptions::new().len(10), &sock), &sock, "socket");
}

#[test]
fn character_devices_other_than_devdax_are_not_mappable() {
    let null = Path::new("/dev/null");
    not_mappable(map(&MapOptions::new().len(4096), null), null, "not a devdax device");
    not_mappable(map(&MapOptions::new(), null), null, "character device");
}

#[test]
fn block_devices_are_not_mappable() {
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    let dir = TempDir::new("blk");
    let node = dir.join("blk");
    // A device node of its own (as root) or any block device of the machine.
    let path = match mknod(&node, SFlag::S_IFBLK, Mode::from_bits_truncate(0o600), makedev(7, 0)) {
        Ok(()) => node,
        Err(e) => fs::read_dir("/dev")
            .unwrap()
            .filter_map(|d| d.ok().map(|d| d.path()))
            .find(|p| {
                use std::os::unix::fs::FileTypeExt;
                fs::metadata(p).is_ok_and(|m| m.file_type().is_block_device())
            })
            .unwrap_or_else(|| panic!("mknod failed ({e}) and /dev has no block device to test with")),
    };
    not_mappable(map(&MapOptions::new().len(4096), &path), &path, "block device");
}

#[test]
fn a_symlink_maps_its_target() {
    let dir = TempDir::new("link");
    fs::write(dir.join("target"), b"through a link").unwrap();
    std::os::unix::fs::symlink("target", dir.join("link")).unwrap();
    assert_eq!(map(&MapOptions::new(), &dir.join("link")).unwrap().to_vec(), b"through a link");
}

/// MAP_SYNC on a file of `base`, which must refuse it.
fn map_sync_is_refused_on(base: &Path) {
    let dir = TempDir::new_in(base, "mapsync");
    let path = dir.join("f");
    fs::write(&path, vec![5u8; 4096]).unwrap();
    match map(&MapOptions::new().map_sync(MapSync::Required), &path) {
        Err(e @ MemError::MapSyncUnsupported { .. }) => {
            assert_eq!(e.errno(), Some(libc::EOPNOTSUPP));
            assert!(e.to_string().contains("MAP_SYNC"), "{e}");
        }
        other => panic!("{}: MAP_SYNC should be refused, got {other:?}", path.display()),
    }
    let mem = map(&MapOptions::new().map_sync(MapSync::IfSupported), &path).unwrap();
    assert!(!mem.is_map_sync(), "fell back to a plain shared mapping");
    assert_eq!(mem.to_vec(), vec![5u8; 4096]);
    let mem = map(&MapOptions::new(), &path).unwrap();
    assert!(!mem.is_map_sync(), "IfSupported is the default");
    let mem = map(&MapOptions::new().map_sync(MapSync::Never), &path).unwrap();
    assert!(!mem.is_map_sync());
}

#[test]
fn map_sync_is_refused_on_tmpfs() {
    let shm = tmpfs_dir().expect("/dev/shm is a tmpfs on Linux machines");
    map_sync_is_refused_on(&shm);
}

#[test]
fn map_sync_is_refused_on_the_temporary_directory_without_dax() {
    let tmp = std::env::temp_dir();
    let (fs_type, options) = mount_of(&tmp);
    if options.split(',').any(|o| o.starts_with("dax")) {
        // A DAX mount may grant MAP_SYNC: then Required must give a MAP_SYNC mapping.
        let dir = TempDir::new("mapsync-dax");
        let mem = map(&MapOptions::new().create(true).len(4096).map_sync(MapSync::Required), &dir.join("f"));
        assert!(mem.as_ref().map_or(true, Memory::is_map_sync), "{fs_type} ({options}): {mem:?}");
    } else {
        map_sync_is_refused_on(&tmp);
    }
}

#[test]
fn a_mapping_moves_between_threads() {
    let dir = TempDir::new("thread");
    let path = dir.join("f");
    let mem = map(&MapOptions::new().create(true).len(64), &path).unwrap();
    let mem = std::thread::spawn(move || {
        mem.volatile().write(0, b"moved").unwrap();
        mem
    })
    .join()
    .unwrap();
    std::thread::spawn(move || drop(mem)).join().unwrap();
    assert_eq!(&fs::read(&path).unwrap()[..5], b"moved");
}
