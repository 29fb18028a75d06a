//! File-backed regions on the mock: a file mapped with `rpma_mem::MapOptions` (a shared
//! mapping) and registered. The region is the file's bytes; a persistent flush covering a range
//! syncs that range to the file before it completes (`msync`), a visibility flush does not, and
//! deregistration syncs the whole region. A file that cannot be mapped is an error before any
//! registration.
//!
//! A shared mapping puts every store in the file's page cache at once, so "reached the file" is
//! observed as the kernel does: the mapping's dirty pages (`/proc/self/smaps`), which a sync
//! writes back and cleans. More dirty pages than expected is a failure (a sync was missing);
//! fewer means the kernel wrote some back on its own (memory pressure), and the scenario is run
//! again. On a file system that keeps pages dirty after `msync` (tmpfs) those checks are skipped
//! with a message.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use rpma_core::{
    Conn, ConnEvent, ConnReq, ContextType, Device, Ep, FlushType, MrLocal, MrRemote, Peer, PeerCfg, Usage,
};
use rpma_mem::{MapOptions, MemError, Memory, MemoryKind};
use rpma_mock::MockFabric;

/// A fresh directory for one test, on the target directory's file system (a disk, where
/// `msync` writes back), removed by [`TempDir::drop`].
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "rpma-mock-file-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Maps `path` read-write, creating it or extending it to `len` bytes.
fn map_created(path: &Path, len: usize) -> Memory {
    // SAFETY: [M5] the file is private to this test; nothing truncates it while it is mapped.
    unsafe { MapOptions::new().create(true).len(len).map(path) }.unwrap()
}

fn peer(fabric: &MockFabric, kind: ContextType) -> Peer<MockFabric> {
    Peer::new(&Device::lookup(fabric, "127.0.0.1", kind).unwrap()).unwrap()
}

fn file_at(path: &Path, offset: usize, len: usize) -> Vec<u8> {
    std::fs::read(path).unwrap()[offset..offset + len].to_vec()
}

/// The mapping of `/proc/self/smaps` that holds `ptr`: (kernel page size, dirty bytes).
fn smaps_of(ptr: *const u8) -> (usize, usize) {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let addr = ptr as usize;
    let kb = |line: &str| -> usize {
        line.split_whitespace().nth(1).and_then(|v| v.parse::<usize>().ok()).expect("a size in kB") * 1024
    };
    let (mut inside, mut page, mut dirty) = (false, 0, 0);
    for line in smaps.lines() {
        let range = line
            .split_whitespace()
            .next()
            .and_then(|r| r.split_once('-'))
            .and_then(|(a, b)| Some((usize::from_str_radix(a, 16).ok()?, usize::from_str_radix(b, 16).ok()?)));
        if let Some((start, end)) = range {
            if inside {
                break;
            }
            inside = start <= addr && addr < end;
        } else if inside && line.starts_with("KernelPageSize:") {
            page = kb(line);
        } else if inside && (line.starts_with("Shared_Dirty:") || line.starts_with("Private_Dirty:")) {
            dirty += kb(line);
        }
    }
    assert!(page > 0, "no mapping at {addr:#x} in /proc/self/smaps");
    (page, dirty)
}

/// Dirty bytes of the mapping behind `mr`.
fn dirty(mr: &MrLocal<MockFabric>) -> usize {
    smaps_of(mr.volatile().as_ptr()).1
}

/// The kernel page size of file mappings, and whether `msync` cleans the pages of a file in
/// `dir` (false on tmpfs, whose pages stay dirty).
fn page_and_msync_cleans(dir: &TempDir) -> (usize, bool) {
    let mem = map_created(&dir.path("probe"), 1);
    let (page, before) = smaps_of(mem.as_ptr());
    mem.volatile().store_u8(0, 1).unwrap();
    let (_, written) = smaps_of(mem.as_ptr());
    mem.flush(0, 1).unwrap();
    let (_, synced) = smaps_of(mem.as_ptr());
    let cleans = before == 0 && written == page && synced == 0;
    if !cleans {
        eprintln!("file_mr: msync does not clean pages here (dirty {before}/{written}/{synced}): dirty checks skipped");
    }
    (page, cleans)
}

#[test]
fn a_mapping_is_registered_with_the_files_bytes() {
    let fabric = MockFabric::new();
    let peer = peer(&fabric, ContextType::Local);
    let dir = TempDir::new();
    // A new file is created with the mapping's length, zeroed.
    let path = dir.path("new");
    let mr = peer.reg_mr(map_created(&path, 4096), Usage::READ_SRC).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 4096);
    assert_eq!(mr.to_vec(0, 4096).unwrap(), vec![0u8; 4096]);
    drop(mr);
    // An existing shorter file is extended and its bytes are the region's.
    let old = dir.path("old");
    std::fs::write(&old, b"previous content").unwrap();
    let mr = peer.reg_mr(map_created(&old, 64), Usage::READ_SRC).unwrap();
    assert_eq!(std::fs::metadata(&old).unwrap().len(), 64);
    assert_eq!(mr.to_vec(0, 16).unwrap(), b"previous content");
    assert_eq!(mr.to_vec(16, 48).unwrap(), vec![0u8; 48]);
    drop(mr);
    // A longer file keeps its length; only the first `len` bytes are registered; without
    // `create`, an existing file long enough is mapped as it is.
    let long = dir.path("long");
    std::fs::write(&long, vec![7u8; 100]).unwrap();
    // SAFETY: [M5] the file is private to this test; nothing truncates it while it is mapped.
    let mem = unsafe { MapOptions::new().len(10).map(&long) }.unwrap();
    assert_eq!(mem.kind(), MemoryKind::File);
    let mr = peer.reg_mr(mem, Usage::READ_SRC).unwrap();
    assert_eq!(mr.len(), 10);
    assert_eq!(mr.to_vec(0, 10).unwrap(), vec![7u8; 10]);
    mr.write(0, b"0123456789").unwrap();
    // Deregistration gives the mapping back.
    let mem = mr.dereg().unwrap().expect("nothing in flight holds the region");
    assert_eq!((mem.kind(), mem.len()), (MemoryKind::File, 10));
    drop(mem);
    let after = std::fs::read(&long).unwrap();
    assert_eq!((after.len(), &after[..10], after[10]), (100, &b"0123456789"[..], 7));
    assert_eq!(fabric.live().mrs, 0, "{:?}", fabric.live());
}

#[test]
fn a_file_that_cannot_be_mapped_is_an_error() {
    let dir = TempDir::new();
    // Too short, without `create`: refused, and the file is left as it was.
    let short = dir.path("short");
    std::fs::write(&short, [1u8; 100]).unwrap();
    // SAFETY: [M5] the file is private to this test; nothing truncates it while it is mapped.
    let e = unsafe { MapOptions::new().len(4096).map(&short) }.unwrap_err();
    assert!(matches!(e, MemError::TooShort { size: 100, needed: 4096, .. }), "{e:?}");
    assert_eq!(std::fs::read(&short).unwrap(), [1u8; 100], "not extended");
    // A directory.
    // SAFETY: [M5] nothing is mapped: the path is a directory.
    let e = unsafe { MapOptions::new().create(true).len(64).map(&dir.0) }.unwrap_err();
    assert!(matches!(e, MemError::NotMappable { .. }), "{e:?}");
    // A missing file without `create`; a missing directory with it.
    // SAFETY: [M5] nothing is mapped: the file does not exist.
    let e = unsafe { MapOptions::new().len(64).map(dir.path("missing")) }.unwrap_err();
    assert!(matches!(e, MemError::Io { op: "open", .. }), "{e:?}");
    assert!(!dir.path("missing").exists(), "not created");
    // SAFETY: [M5] nothing is mapped: the directory does not exist.
    let e = unsafe { MapOptions::new().create(true).len(64).map(dir.path("no/such/dir/f")) }.unwrap_err();
    assert!(matches!(e, MemError::Io { op: "open", .. }), "{e:?}");
}

struct Pair {
    _ep: Ep<MockFabric>,
    client: Conn<MockFabric>,
    _server: Conn<MockFabric>,
    peer: Peer<MockFabric>,
}

/// A connection from a client to a server on `fabric`; the server's region `target` is handed
/// out with the accept; the server declares direct write to PMem.
fn pair(fabric: &MockFabric, server_peer: &Peer<MockFabric>, target: &MrLocal<MockFabric>) -> Pair {
    let ep = Ep::listen(server_peer, "127.0.0.1", "7300").unwrap();
    let peer = peer(fabric, ContextType::Remote);
    let client = ConnReq::new(&peer, "127.0.0.1", "7300", None).unwrap().connect(None).unwrap();
    let server = ep.next_conn_req(None).unwrap().connect(Some(&target.descriptor())).unwrap();
    assert_eq!(client.next_event().unwrap(), ConnEvent::Established);
    assert_eq!(server.next_event().unwrap(), ConnEvent::Established);
    client.apply_remote_peer_cfg(&PeerCfg::new().with_direct_write_to_pmem(true));
    Pair { _ep: ep, client, _server: server, peer }
}

fn write_and_complete(p: &Pair, remote: &MrRemote, offset: usize, bytes: &[u8]) {
    let mut src = p.peer.alloc_mr(bytes.len(), Usage::WRITE_SRC).unwrap();
    src.as_mut_slice().unwrap().copy_from_slice(bytes);
    p.client.write(remote.at(offset), src.slice(..)).context(1).post().unwrap();
    let wc = p.client.cq().next_wc().unwrap().expect("the mock completes at once");
    assert_eq!((wc.wr_id(), wc.is_success()), (1, true), "{wc:?}");
}

fn flush(p: &Pair, remote: &MrRemote, offset: usize, len: usize, t: FlushType) {
    p.client.flush(remote.slice(offset..offset + len), t).context(2).post().unwrap();
    let wc = p.client.cq().next_wc().unwrap().expect("the mock completes at once");
    assert_eq!((wc.wr_id(), wc.is_success()), (2, true), "{wc:?}");
}

/// One run of the scenario; `Err` if the kernel wrote back pages on its own meanwhile.
fn persistent_flush_syncs_the_range(native: bool) -> Result<(), String> {
    let fabric = MockFabric::builder().native(native, false).build();
    let server_peer = peer(&fabric, ContextType::Local);
    let dir = TempDir::new();
    let (page, checks) = page_and_msync_cleans(&dir);
    let path = dir.path("pmem");
    let usage = Usage::WRITE_DST | Usage::FLUSH_TYPE_PERSISTENT | Usage::FLUSH_TYPE_VISIBILITY;
    // Four pages, each written by one step below.
    let target = server_peer.reg_mr(map_created(&path, 4 * page), usage).unwrap();
    let p = pair(&fabric, &server_peer, &target);
    let remote = MrRemote::from_descriptor(p.client.private_data()).unwrap();
    // Dirty pages of the target must be `want`: more fails the test, fewer is a writeback by
    // the kernel (retried).
    let expect_dirty = |want: usize, what: &str| -> Result<(), String> {
        if !checks {
            return Ok(());
        }
        let d = dirty(&target);
        assert_eq!(d % page, 0, "{what}");
        assert!(d / page <= want, "{what}: {} dirty pages, expected {want}", d / page);
        if d / page < want {
            return Err(format!("{what}: {} dirty pages, expected {want}", d / page));
        }
        Ok(())
    };

    // A write lands in the region, which is the file's page cache; it is not synced yet.
    write_and_complete(&p, &remote, 100, b"durable record");
    assert_eq!(target.to_vec(100, 14).unwrap(), b"durable record");
    expect_dirty(1, "after a write")?;
    // A persistent flush covering it syncs it before it completes.
    flush(&p, &remote, 100, 14, FlushType::Persistent);
    assert_eq!(file_at(&path, 100, 14), b"durable record");
    expect_dirty(0, "after a persistent flush")?;

    // A visibility flush syncs nothing.
    write_and_complete(&p, &remote, page + 200, b"visible only");
    flush(&p, &remote, page + 200, 12, FlushType::Visibility);
    expect_dirty(1, "after a visibility flush")?;
    // A persistent flush syncs the pages of the range it covers, not others.
    write_and_complete(&p, &remote, 2 * page + 300, b"AAAA");
    write_and_complete(&p, &remote, 3 * page + 300, b"BBBB");
    expect_dirty(3, "three pages written")?;
    flush(&p, &remote, 2 * page + 300, 4, FlushType::Persistent);
    expect_dirty(2, "after a persistent flush of one page")?;

    // Deregistration syncs everything (checked while the mapping it hands back still exists).
    let ptr = target.volatile().as_ptr();
    let mem = target.dereg().unwrap().expect("nothing in flight holds the region");
    if checks {
        assert_eq!(smaps_of(ptr).1, 0, "dirty bytes after deregistration");
    }
    drop(mem);
    assert_eq!(file_at(&path, 100, 14), b"durable record");
    assert_eq!(file_at(&path, page + 200, 12), b"visible only");
    assert_eq!(file_at(&path, 2 * page + 300, 4), b"AAAA");
    assert_eq!(file_at(&path, 3 * page + 300, 4), b"BBBB");
    Ok(())
}

/// Runs the scenario until no writeback by the kernel interferes (at most 5 times).
fn persistent_flush_syncs(native: bool) {
    let mut interfered = Vec::new();
    while let Err(e) = persistent_flush_syncs_the_range(native) {
        interfered.push(e);
        assert!(interfered.len() < 5, "the kernel wrote back pages in every run: {interfered:?}");
    }
}

#[test]
fn persistent_flush_syncs_the_range_emulated() {
    persistent_flush_syncs(false);
}

#[test]
fn persistent_flush_syncs_the_range_native() {
    persistent_flush_syncs(true);
}

#[test]
fn dropping_a_file_region_leaves_its_bytes_in_the_file() {
    let fabric = MockFabric::new();
    let peer = peer(&fabric, ContextType::Local);
    let dir = TempDir::new();
    let path = dir.path("drop");
    let mr = peer.reg_mr(map_created(&path, 128), Usage::WRITE_DST).unwrap();
    mr.write(5, b"kept").unwrap();
    drop(mr);
    assert_eq!(fabric.live().mrs, 0);
    assert_eq!(file_at(&path, 5, 4), b"kept");
    // Mapped again, the region holds them.
    let mr = peer.reg_mr(map_created(&path, 128), Usage::READ_SRC).unwrap();
    assert_eq!(mr.to_vec(5, 4).unwrap(), b"kept");
}
