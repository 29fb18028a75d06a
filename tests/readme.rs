//! The README's "Using it" snippet, compiled and run: the body of `readme_snippet` between the
//! `README BEGIN` / `README END` markers is the README's code block, line for line
//! (`readme_is_this_test`), so the two cannot drift apart.
#![allow(missing_docs)]

#[test]
fn readme_snippet() -> Result<(), Box<dyn std::error::Error>> {
    // README BEGIN
    use rpma::mock::{ConnReq, Device, Ep, MockFabric, Peer};
    use rpma::{op, CompletionFlags, ConnEvent, ContextType, FlushType, MrRemote, Usage};

    let fabric = MockFabric::new();
    let peer = Peer::new(&Device::lookup(&fabric, "127.0.0.1", ContextType::Local)?)?;
    let ep = Ep::listen(&peer, "127.0.0.1", "7204")?;
    let target = peer.alloc_mr(4096, Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY)?;
    let client = ConnReq::new(&peer, "127.0.0.1", "7204", None)?.connect(None)?;
    let server = ep.next_conn_req(None)?.connect(Some(&target.descriptor()))?;
    assert_eq!(client.next_event()?, ConnEvent::Established);
    assert_eq!(server.next_event()?, ConnEvent::Established);
    let remote = MrRemote::from_descriptor(client.private_data())?;

    // No peer can reach a WRITE_SRC region: it can be filled in place.
    let mut src = peer.alloc_mr(4096, Usage::WRITE_SRC)?;
    src.as_mut_slice()?[..10].copy_from_slice(b"log record");
    client.write(remote.at(0), src.slice(0..10)).flags(CompletionFlags::ON_ERROR).post()?;
    // An operation is a value (rpma::op), posted by the connection; the line above is the
    // same thing written from the connection.
    client.post(op::flush(remote.slice(0..10), FlushType::Visibility).context(2))?;
    // Sleeps until the flush's completion (at most 5 s).
    let wc = client.cq().wait_next(Some(std::time::Duration::from_secs(5)))?;
    assert_eq!((wc.wr_id(), wc.is_success()), (2, true));
    // A peer may write `target` at any time: its bytes are read by copy.
    assert_eq!(target.to_vec(0, 10)?, b"log record");
    // README END
    Ok(())
}

/// The README's block is the snippet above (indentation removed).
#[test]
fn readme_is_this_test() {
    let readme = include_str!("../README.md");
    let block = readme
        .split_once("## Using it")
        .and_then(|(_, rest)| rest.split_once("```rust\n"))
        .and_then(|(_, rest)| rest.split_once("```\n"))
        .map(|(code, _)| code)
        .expect("README.md has a ```rust block under \"## Using it\"");
    let me = include_str!("readme.rs");
    let begin = me.find("// README BEGIN\n").expect("begin marker") + "// README BEGIN\n".len();
    let end = me.find("    // README END\n").expect("end marker");
    let snippet: String =
        me[begin..end].lines().map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l))).collect();
    assert_eq!(block, snippet, "README.md's \"Using it\" block differs from tests/readme.rs");
}
