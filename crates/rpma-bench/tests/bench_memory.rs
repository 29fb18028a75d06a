//! `rpma bench`'s memory: a run allocates per connection only what its operations use, and one
//! that cannot fit in the memory available is refused before anything is allocated.
#![cfg(feature = "mock")]

use clap::Parser;
use rpma_bench::{self as bench, footprint, BenchArgs, Footprint};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

fn plan_of(line: &[&str]) -> bench::Plan {
    let a = Cli::try_parse_from(std::iter::once("bench").chain(line.iter().copied())).expect("valid arguments").args;
    bench::plan(&a).expect("a valid plan")
}

const G: usize = 1 << 30;

#[test]
fn a_write_only_run_allocates_no_receive_buffers() {
    let f = Footprint::of(&plan_of(&["--op", "write", "--size", "1G"]));
    assert_eq!((f.client_recv_len(), f.client_recv_max, f.server_recv_max, f.source_max, f.inbox_max), (0, 0, 0, 0, 0));
    // The source and the target, and a few placeholder bytes (descriptors, control messages):
    // ~2 GiB, not the ~7 GiB of receive, echo and inbox buffers of 1 GiB each.
    assert_eq!(f.local_len(), G);
    assert_eq!(f.target_len(), G);
    assert!(f.server_recv_len() <= 64, "{f:?}");
    let total = f.client_bytes() + f.server_bytes();
    assert!(total < (2 * G + 4096) as u128, "{total}");
    assert_eq!(footprint::bytes_needed(&plan_of(&["--op", "write", "--size", "1G"])), total);
}

#[test]
fn each_operation_gets_only_its_own_buffers() {
    let f = Footprint::of(&plan_of(&["--op", "send", "--size", "4K", "--qd", "4"]));
    assert_eq!((f.client_recv_len(), f.server_recv_len(), f.source_max), (4 * 4096, 5 * 4096, 4096));
    assert_eq!((f.target_max, f.inbox_max), (0, 0), "a send touches no target region");
    let f = Footprint::of(&plan_of(&["--op", "write-imm", "--size", "4K", "--qd", "4"]));
    assert_eq!((f.client_recv_max, f.server_recv_max, f.target_max), (4096, 0, 4096));
    let f = Footprint::of(&plan_of(&["--op", "write-pingpong", "--size", "64K"]));
    assert_eq!((f.inbox_len(), f.source_max, f.client_recv_max, f.server_recv_max), (65536, 65536, 0, 0));
    let f = Footprint::of(&plan_of(&["--op", "flush,atomic-write", "--size", "8", "--qd", "8"]));
    assert_eq!((f.local_max, f.target_max), (0, 8));
    // The loopback counts both sides of every connection; a baseline its two buffers.
    let p = plan_of(&["--op", "read", "--size", "1M", "--qd", "2", "--conns", "3", "--baseline"]);
    let f = Footprint::of(&p);
    assert_eq!(footprint::bytes_needed(&p), 3 * (f.client_bytes() + f.server_bytes()) + 2 * (1 << 20));
}

#[test]
fn a_write_only_run_of_the_mock_sends_and_receives_only_control_messages() {
    // Zero-length receives on the client and 8-byte placeholders on the server carry the
    // ping-pong start and the stop; the run completes.
    let a = Cli::try_parse_from([
        "bench",
        "--op",
        "write,read",
        "--size",
        "64K",
        "--iters",
        "20",
        "--port",
        "7621",
        "--no-progress",
    ])
    .unwrap()
    .args;
    let r = bench::measure(&a, None).expect("the benchmark runs");
    assert_eq!(r.results.len(), 2);
}

#[test]
fn the_memory_check_reads_mem_available() {
    let info = "MemTotal:       16287516 kB\nMemFree:          303012 kB\nMemAvailable:    8143756 kB\n";
    assert_eq!(footprint::parse_mem_available(info), Some(8_143_756 * 1024));
    assert_eq!(footprint::parse_mem_available("MemTotal: 1 kB\n"), None);
    assert!(footprint::mem_available().is_some_and(|m| m > 0), "/proc/meminfo has MemAvailable");
    let p = plan_of(&["--op", "write", "--size", "1G"]);
    assert!(footprint::check_fits(&p, Some(3 << 30)).is_ok());
    let e = footprint::check_fits(&p, Some(1 << 30)).unwrap_err().to_string();
    assert!(e.contains("2.0 GiB") && e.contains("1.0 GiB is available") && !e.contains('\n'), "{e}");
}
