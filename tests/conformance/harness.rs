//! What a backend provides to the suite, and helpers shared by the cases.

use std::time::{Duration, Instant};

use rpma::{
    Capabilities, Conn, ConnCfg, ConnEvent, ConnReq, ContextType, Cq, Device, Ep, ErrorKind, MrLocal, MrRemote, Peer,
    Transport, Usage, Wc,
};

/// A backend under test.
pub trait Backend: Send + Sync + 'static {
    /// The transport.
    type T: Transport;
    /// A transport to run one case on (the mock: a fresh, isolated fabric).
    fn transport(&self) -> Self::T;
    /// The address a server listens on and a client connects to.
    fn addr(&self) -> String;
    /// A port no other case uses concurrently.
    fn port(&self) -> String;
    /// What the backend (and its device) can do.
    fn caps(&self) -> Capabilities;
}

/// A named case.
pub type Case<B> = (&'static str, fn(&B));

/// Builds `vec![("name", name::<B> as fn(&B)), ...]`.
#[macro_export]
macro_rules! cases {
    ($($name:ident),* $(,)?) => {
        vec![$((stringify!($name), $name::<B> as fn(&B))),*]
    };
}

/// A peer on the backend's device.
pub fn peer<B: Backend>(b: &B, t: &B::T) -> Peer<B::T> {
    let dev = Device::lookup(t, &b.addr(), ContextType::Local).expect("device lookup");
    Peer::new(&dev).expect("peer")
}

/// A connected pair of connections (client, server) plus the server's endpoint.
pub struct Pair<T: Transport> {
    /// Client (active side).
    pub client: Conn<T>,
    /// Server (passive side).
    pub server: Conn<T>,
    /// Client peer.
    pub cpeer: Peer<T>,
    /// Server peer.
    pub speer: Peer<T>,
    /// The listening endpoint.
    pub ep: Ep<T>,
}

/// Connects a client to a server with the given configurations and private data, taking the
/// ESTABLISHED event on both sides.
pub fn pair_with<B: Backend>(
    b: &B,
    t: &B::T,
    ccfg: Option<&ConnCfg<B::T>>,
    scfg: Option<&ConnCfg<B::T>>,
    cpdata: Option<&[u8]>,
    spdata: Option<&[u8]>,
) -> Pair<B::T> {
    let speer = peer(b, t);
    let cpeer = peer(b, t);
    let port = b.port();
    let ep = Ep::listen(&speer, &b.addr(), &port).expect("listen");
    let req = ConnReq::new(&cpeer, &b.addr(), &port, ccfg).expect("conn_req_new");
    let client = req.connect(cpdata).expect("connect");
    let sreq = ep.next_conn_req(scfg).expect("next_conn_req");
    let server = sreq.connect(spdata).expect("accept");
    assert_eq!(client.next_event().expect("client event"), ConnEvent::Established);
    assert_eq!(server.next_event().expect("server event"), ConnEvent::Established);
    Pair { client, server, cpeer, speer, ep }
}

/// A connected pair with default configurations and no private data.
pub fn pair<B: Backend>(b: &B, t: &B::T) -> Pair<B::T> {
    pair_with(b, t, None, None, None, None)
}

/// Registers `len` bytes for `usage` on `peer`.
pub fn mr<T: Transport>(peer: &Peer<T>, len: usize, usage: Usage) -> MrLocal<T> {
    peer.alloc_mr(len, usage).expect("mr_reg")
}

/// The remote view of a local region (as the peer would decode its descriptor).
pub fn remote<T: Transport>(mr: &MrLocal<T>) -> MrRemote {
    MrRemote::from_descriptor(&mr.descriptor()).expect("remote_from_descriptor")
}

/// Polls `cq` until a completion arrives (fails after 10 s: a case never hangs).
pub fn next_wc<T: Transport>(cq: Cq<'_, T>) -> Wc {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match cq.next_wc() {
            Ok(Some(wc)) => return wc,
            Ok(None) => {
                assert!(Instant::now() < deadline, "no completion within 10 s");
                std::thread::yield_now();
            }
            Err(e) => panic!("next_wc failed: {e}"),
        }
    }
}

/// Asserts that nothing is (or becomes, within a short grace period) available on `cq`: an
/// empty queue polls as `Ok(None)` (librpma's `RPMA_E_NO_COMPLETION`).
pub fn assert_no_wc<T: Transport>(cq: Cq<'_, T>) {
    std::thread::sleep(Duration::from_millis(20));
    match cq.next_wc() {
        Ok(None) => {}
        Ok(Some(wc)) => panic!("unexpected completion {wc:?}"),
        Err(e) => panic!("next_wc failed: {e}"),
    }
}

/// Asserts a result failed with `kind`.
#[track_caller]
pub fn assert_kind<T: std::fmt::Debug>(r: rpma::Result<T>, kind: ErrorKind) {
    match r {
        Ok(v) => panic!("expected {kind:?}, got Ok({v:?})"),
        Err(e) => assert_eq!(e.kind(), kind, "{e}"),
    }
}
