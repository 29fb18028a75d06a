//! Thread safety of the data path.

use super::*;

#[test]
fn types__send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send::<Conn>();
    send_sync::<Peer>();
    send_sync::<MrLocal>();
    send_sync::<Srq>();
    send_sync::<ConnCfg>();
    send_sync::<MockFabric>();
    send::<Ep>();
    send::<ConnReq>();
}

#[test]
/// A connection shared by threads behind a `Mutex` (it is `Send`, not `Sync`): every thread
/// posts and polls through the lock, any thread may reap any completion.
fn conn__concurrent_writes_complete_once() {
    const THREADS: u64 = 4;
    const PER: u64 = 64;
    let f = MockFabric::new();
    let cfg = ConnCfg::new().with_sq_size((THREADS * PER) as u32).with_cq_size((THREADS * PER) as u32);
    let Pair { client, server: _server, cpeer, speer, ep: _ep } = pair_with(&f, Some(&cfg), None);
    let client = Mutex::new(client);
    let src = cpeer.alloc_mr(4096, Usage::WRITE_SRC).unwrap();
    let dst = speer.alloc_mr((THREADS * PER * 8) as usize, Usage::WRITE_DST).unwrap();
    let rdst = remote(&dst);
    for t in 0..THREADS {
        src.write(t as usize * 8, &[t as u8 + 1; 8]).unwrap();
    }
    let done = Mutex::new(Vec::new());
    let deadline = Instant::now() + DEADLINE;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (client, src, done) = (&client, &src, &done);
            s.spawn(move || {
                for i in 0..PER {
                    let ctx = (t << 32) | i;
                    let off = ((t * PER + i) * 8) as usize;
                    client
                        .lock()
                        .unwrap()
                        .write(rdst.at(off), src.slice(t as usize * 8..t as usize * 8 + 8))
                        .context(ctx)
                        .post()
                        .unwrap();
                }
                // Poll until every thread's operations completed (any thread may reap any).
                loop {
                    let mut wc = [Wc::EMPTY; 8];
                    let polled = client.lock().unwrap().cq().poll(&mut wc);
                    match polled {
                        Ok(0) => std::thread::yield_now(),
                        Ok(n) => {
                            let mut g = done.lock().unwrap();
                            for w in &wc[..n] {
                                assert_eq!(w.status(), WcStatus::Success);
                                g.push(w.wr_id());
                            }
                        }
                        Err(e) => panic!("{e}"),
                    }
                    if done.lock().unwrap().len() as u64 >= THREADS * PER {
                        break;
                    }
                    assert!(Instant::now() < deadline, "completions missing after 10 s");
                }
            });
        }
    });
    let mut got = done.into_inner().unwrap();
    got.sort_unstable();
    let mut want: Vec<u64> = (0..THREADS).flat_map(|t| (0..PER).map(move |i| (t << 32) | i)).collect();
    want.sort_unstable();
    assert_eq!(got, want, "every op context completes exactly once");
    assert_eq!(client.lock().unwrap().backend().sq_in_use(), 0);
    for t in 0..THREADS {
        for i in 0..PER {
            let off = ((t * PER + i) * 8) as usize;
            assert_eq!(dst.to_vec(off, 8).unwrap(), [t as u8 + 1; 8]);
        }
    }
}
