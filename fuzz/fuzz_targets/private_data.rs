//! Private data over the mock, with arbitrary bytes and lengths on both sides: through the API
//! (validated: `InvalidInput` unless absent or 1..=56 bytes on connect, 1..=196 on accept) and from
//! a lying client that bypasses the validation and calls the transport directly (the transport
//! refuses more than RDMA CM carries). Whatever is accepted arrives intact, zero-padded to the
//! field size; nothing panics.
#![no_main]

use std::sync::Arc;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use rpma::mock::{ConnReq, Device, Ep, MockFabric, Peer};
use rpma::transport::{CmBackend, QueueConfig};
use rpma::{ConnEvent, ContextType, ErrorKind, Transport};

const ADDR: &str = "127.0.0.1";
const PORT: &str = "7100";

#[derive(Arbitrary, Debug)]
struct Input {
    connect: Option<Vec<u8>>,
    accept: Option<Vec<u8>>,
    /// The client bypasses rpma-core and calls the transport itself.
    raw: bool,
}

fn padded(p: Option<&[u8]>, to: usize) -> Vec<u8> {
    p.map_or_else(Vec::new, |p| {
        let mut v = p.to_vec();
        if v.len() < to {
            v.resize(to, 0);
        }
        v
    })
}

fn valid(p: Option<&[u8]>, limit: usize) -> bool {
    p.is_none_or(|p| !p.is_empty() && p.len() <= limit)
}

fuzz_target!(|input: Input| {
    let f = MockFabric::new();
    let caps = f.devices()[0].capabilities().clone();
    let dev = Device::lookup(&f, ADDR, ContextType::Local).unwrap();
    let (speer, cpeer) = (Peer::new(&dev).unwrap(), Peer::new(&dev).unwrap());
    let ep = Ep::listen(&speer, ADDR, PORT).unwrap();
    let cdata = input.connect.as_deref();
    if input.raw {
        let pd = Arc::new(f.alloc_pd(dev.backend(), &caps).unwrap());
        let cfg = QueueConfig {
            timeout_ms: i32::try_from(rpma::mock::ConnCfg::DEFAULT_TIMEOUT.as_millis()).unwrap(),
            cq_size: 4,
            rcq_size: 0,
            sq_size: 4,
            rq_size: 4,
            max_sge: 1,
            max_inline: 0,
            retry_count: 7,
            ack_timeout: None,
            shared_channel: false,
            srq: None,
        };
        let mut qp = f.connect_request(&pd, ADDR, PORT, &cfg).unwrap();
        match qp.connect(cdata) {
            Ok(()) => {
                assert!(cdata.is_none_or(|p| p.len() <= caps.max_private_data_connect));
                let req = ep.next_conn_req(None).unwrap();
                assert_eq!(req.private_data(), padded(cdata, caps.max_private_data_connect));
            }
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Provider, "{e}");
                assert!(cdata.is_some_and(|p| p.len() > caps.max_private_data_connect));
            }
        }
        return;
    }
    let req = ConnReq::new(&cpeer, ADDR, PORT, None).unwrap();
    let client = match req.connect(cdata) {
        Ok(c) => {
            assert!(valid(cdata, caps.max_private_data_connect));
            c
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
            assert!(!valid(cdata, caps.max_private_data_connect));
            return;
        }
    };
    let sreq = ep.next_conn_req(None).unwrap();
    let want = padded(cdata.filter(|p| !p.is_empty()), caps.max_private_data_connect);
    assert_eq!(sreq.private_data(), want);
    let adata = input.accept.as_deref();
    match sreq.connect(adata) {
        Ok(server) => {
            assert!(valid(adata, caps.max_private_data_accept));
            assert_eq!(client.next_event().unwrap(), ConnEvent::Established);
            assert_eq!(server.next_event().unwrap(), ConnEvent::Established);
            assert_eq!(client.private_data(), padded(adata, caps.max_private_data_accept));
            assert_eq!(server.private_data(), want);
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
            assert!(!valid(adata, caps.max_private_data_accept));
            assert_eq!(client.next_event().unwrap(), ConnEvent::Rejected);
        }
    }
});
