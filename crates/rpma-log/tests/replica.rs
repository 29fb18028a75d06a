//! What a replica reports of the writers it serves: how many took the log over, and how long
//! the last request took to answer, from its arrival on (not the wait for it).

mod common;

use std::time::Duration;

use common::{addrs, builder, peer, replica_ip, writer_peer, LOG_ID, PORT};
use rpma::Memory;
use rpma_log::{Log, LogOptions, Quorum, Replica};

/// How long the writer waits before it asks: well above what answering a request takes.
const LATE: Duration = Duration::from_millis(300);

#[test]
fn a_replica_reports_how_long_it_took_to_answer_a_writer_not_how_long_it_waited_for_one() {
    let fabric = builder(1).build();
    let p = peer(&fabric, &replica_ip(0));
    let mut replica = Replica::format(&p, Memory::page_aligned(64 * 1024).expect("memory"), LOG_ID)
        .and_then(|r| r.listen(&replica_ip(0), PORT))
        .expect("a replica");
    assert_eq!((replica.takeovers(), replica.answered_in()), (0, None));
    let f = fabric;
    let writer = std::thread::spawn(move || {
        std::thread::sleep(LATE);
        let opts = LogOptions::new(LOG_ID).quorum(Quorum::All).timeout(Duration::from_secs(10));
        Log::open(&writer_peer(&f), &addrs(1), opts).map(|(log, _)| log)
    });
    // One wait covers the writer's pause and its request.
    assert!(replica.serve_once(Duration::from_secs(10)).expect("served"), "no request in 10 s");
    let log = writer.join().expect("the writer").expect("the writer opened the log");
    assert_eq!(replica.takeovers(), 1);
    let answered = replica.answered_in().expect("the answer's time");
    assert!(answered < LATE, "answered in {answered:?}: the wait for the request was counted");
    drop(log);
}
