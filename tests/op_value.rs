//! One operation value (`rpma::op`) for the synchronous and the asynchronous API posts and
//! validates as its builder does. What it refuses at compile time is tested in
//! crates/rpma-compile-fail.
#![allow(missing_docs)]

use rpma::mock::{ConnReq, Device, Ep, MockFabric, Peer};
use rpma::op::Op;
use rpma::{op, CompletionFlags, ConnEvent, ContextType, ErrorKind, FlushType, MrRemote, Usage};

#[test]
fn operation_values_post_and_validate_as_the_builders_do() -> rpma::Result<()> {
    let fabric = MockFabric::new();
    let peer = Peer::new(&Device::lookup(&fabric, "127.0.0.1", ContextType::Local)?)?;
    let target = peer.alloc_mr(4096, Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY)?;
    let inbox = peer.alloc_mr(64, Usage::RECV)?;
    let ep = Ep::listen(&peer, "127.0.0.1", "7231")?;
    let client = ConnReq::new(&peer, "127.0.0.1", "7231", None)?.connect(None)?;
    let req = ep.next_conn_req(None)?;
    let server = req.connect(Some(&target.descriptor()))?;
    assert_eq!(client.next_event()?, ConnEvent::Established);
    assert_eq!(server.next_event()?, ConnEvent::Established);
    let remote = MrRemote::from_descriptor(client.private_data())?;
    let src = peer.alloc_mr(64, Usage::WRITE_SRC | Usage::SEND | Usage::READ_DST)?;
    src.write(0, b"operation value!")?;

    // Values of several kinds kept together (Op<AnyKind>), then posted one by one.
    server.post(op::recv(inbox.slice(..)).context(9))?;
    let ops: [Op<op::AnyKind<'_, _>>; 3] = [
        op::write(remote.at(0), src.slice(0..16)).flags(CompletionFlags::ON_ERROR).into(),
        op::flush(remote.slice(0..16), FlushType::Visibility).context(2).into(),
        op::send(src.slice(0..9)).imm(5).context(3).into(),
    ];
    for o in ops {
        client.post(o)?;
    }
    let mut ids = Vec::new();
    while ids.len() < 2 {
        if let Some(wc) = client.cq().next_wc()? {
            assert!(wc.is_success());
            ids.push(wc.wr_id());
        }
    }
    assert_eq!(ids, [2, 3], "the unsignaled write has no completion");
    let wc = loop {
        if let Some(wc) = server.cq().next_wc()? {
            break wc;
        }
    };
    assert_eq!((wc.wr_id(), wc.byte_len(), wc.imm_data()), (9, 9, Some(5)));
    assert_eq!(target.to_vec(0, 16)?, b"operation value!");

    // The same validation as the builders: the error names the operation and the numbers.
    let e = client.post(op::write(remote.at(4090), src.slice(0..16))).unwrap_err();
    let b = client.write(remote.at(4090), src.slice(0..16)).post().unwrap_err();
    assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, "Conn::write"));
    assert_eq!(e.to_string(), b.to_string());
    // A batch takes values too.
    let mut batch = client.batch();
    batch.push_op(op::read(src.slice(32..48), remote.at(0)).context(4))?;
    batch.post()?;
    let wc = loop {
        if let Some(wc) = client.cq().next_wc()? {
            break wc;
        }
    };
    assert_eq!(wc.wr_id(), 4);
    assert_eq!(src.to_vec(32, 16)?, b"operation value!");
    // A receive kept as an Op<AnyKind> takes no send-queue slot: a batch refuses it, unchanged.
    let any: Op<op::AnyKind<'_, _>> = op::recv(inbox.slice(..)).into();
    let e = batch.push_op(any).unwrap_err();
    assert_eq!((e.kind(), e.op()), (ErrorKind::InvalidInput, "Conn::recv"));
    assert!(batch.is_empty());
    // A builder is the value bound to its connection, with the same options.
    let built = client.write(remote.at(8), src.slice(0..8)).imm(7).context(6).flags(CompletionFlags::ON_ERROR);
    let value = op::write(remote.at(8), src.slice(0..8)).imm(7).context(6).flags(CompletionFlags::ON_ERROR);
    assert_eq!(format!("{:?}", built.into_op()), format!("{value:?}"));
    Ok(())
}

/// `use rpma::op::*` shadows nothing of std's prelude: `Send` here is `std::marker::Send` (with
/// a kind named `Send` in `rpma::op`, this would not compile).
mod glob {
    use rpma::op::*;

    fn is_send<T: Send>(_: &T) -> bool {
        true
    }

    #[test]
    fn a_glob_import_of_op_keeps_std_send() {
        let op: Op<Message<'_, rpma::mock::MockFabric>> = send_empty().imm(1);
        assert!(is_send(&DEFAULT_BATCH));
        assert!(format!("{op:?}").contains("imm: Some(1)"));
    }
}
