//! The README's usage snippet, compiled and run.
#![allow(missing_docs)]

#[test]
fn readme_snippet() -> Result<(), rpma::Error> {
    use rpma::generic::{ConnReq, Device, Ep, Peer};
    use rpma::{mock::MockFabric, CompletionFlags, ConnEvent, ContextType, MrRemote, Usage};

    let fabric = MockFabric::new();
    let peer = Peer::new(&Device::lookup(&fabric, "127.0.0.1", ContextType::Local)?)?;
    let ep = Ep::listen(&peer, "127.0.0.1", "7204")?;
    let target = peer.alloc_mr(4096, Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY)?;
    let client = ConnReq::new(&peer, "127.0.0.1", "7204", None)?.connect(None)?;
    let server = ep.next_conn_req(None)?.connect(Some(&target.descriptor()))?;
    assert_eq!(client.next_event()?, ConnEvent::Established);
    let remote = MrRemote::from_descriptor(client.private_data())?;
    let src = peer.alloc_mr(4096, Usage::WRITE_SRC)?;
    src.write(0, b"log record")?;
    client.write(Some(&remote), 0, Some(&src), 0, 10, CompletionFlags::ON_ERROR, 1)?;
    client.flush(&remote, 0, 10, rpma::FlushType::Visibility, CompletionFlags::ALWAYS, 2)?;
    let wc = client.cq().get_wc1()?;
    assert_eq!(wc.wr_id, 2);
    assert_eq!(target.to_vec(0, 10)?, b"log record");
    drop(server);
    Ok(())
}
