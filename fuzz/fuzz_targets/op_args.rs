//! The validation of operation arguments against the mock: arbitrary regions (length, usage),
//! honest or lying remote descriptors, and sequences of read / write / write with imm / atomic
//! write / flush / send / send with imm / recv (and their empty forms) with arbitrary ranges
//! (inverted, past the end, `..=usize::MAX`), offsets and flags, mixed with polls and requests for
//! a plain `&mut [u8]` of the client region. Every post returns `Ok` or a documented error
//! (`InvalidInput`, `Unsupported`, or `Provider` for a full queue); polling returns at most as many
//! completions as asked (`InvalidInput` for none); `as_mut_slice` is refused (`InvalidInput`)
//! exactly when the usage grants remote access; the client's bytes outside what a read may write
//! never change; nothing panics.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use rpma::descriptor::MrDescriptor;
use rpma::mock::{ConnReq, Device, Ep, MockFabric, MrLocal, Peer};
use rpma::{CompletionFlags, ConnEvent, ContextType, ErrorKind, FlushType, MrRemote, PeerCfg, Usage, Wc};
use rpma::op::{LocalSlice, RemoteSlice};

const ADDR: &str = "127.0.0.1";
const PORT: &str = "7200";

/// A number: mostly small (near region sizes), sometimes anything (overflow paths).
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Num {
    Small(u16),
    Any(usize),
}

impl Num {
    fn get(self) -> usize {
        match self {
            Self::Small(v) => usize::from(v),
            Self::Any(v) => v,
        }
    }
}

/// A range of a region, as `slice` takes it.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Range {
    Full,
    From(Num),
    To(Num),
    Between(Num, Num),
    Inclusive(Num, Num),
}

impl Range {
    /// `[start, end)` within a region of `len` bytes, as rpma-core resolves it (only used for
    /// a range an operation accepted).
    fn bounds(self, len: usize) -> (usize, usize) {
        match self {
            Self::Full => (0, len),
            Self::From(a) => (a.get(), len),
            Self::To(b) => (0, b.get()),
            Self::Between(a, b) => (a.get(), b.get()),
            Self::Inclusive(a, b) => (a.get(), b.get().saturating_add(1)),
        }
    }

    fn local(self, mr: &MrLocal) -> LocalSlice<'_, MockFabric> {
        match self {
            Self::Full => mr.slice(..),
            Self::From(a) => mr.slice(a.get()..),
            Self::To(b) => mr.slice(..b.get()),
            Self::Between(a, b) => mr.slice(a.get()..b.get()),
            Self::Inclusive(a, b) => mr.slice(a.get()..=b.get()),
        }
    }

    fn remote(self, mr: &MrRemote) -> RemoteSlice<'_> {
        match self {
            Self::Full => mr.slice(..),
            Self::From(a) => mr.slice(a.get()..),
            Self::To(b) => mr.slice(..b.get()),
            Self::Between(a, b) => mr.slice(a.get()..b.get()),
            Self::Inclusive(a, b) => mr.slice(a.get()..=b.get()),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Op {
    Read { dst: Range, src: bool, src_off: Num, flags: u32 },
    ReadEmpty { flags: u32 },
    Write { dst: bool, dst_off: Num, src: Range, flags: u32, imm: Option<u32> },
    WriteEmpty { flags: u32, imm: Option<u32> },
    AtomicWrite { dst: bool, off: Num, flags: u32 },
    Flush { dst: bool, range: Range, persistent: bool, flags: u32 },
    Send { src: Option<Range>, flags: u32, imm: Option<u32> },
    Recv { dst: Option<Range> },
    Poll { server: bool, n: u8 },
    MutSlice,
    ApplyPeerCfg(bool),
}

#[derive(Arbitrary, Debug)]
struct Input {
    local_len: u16,
    local_usage: u16,
    target_len: u16,
    target_usage: u16,
    /// A lying descriptor of the target: xor on the address, a claimed length, xor on the
    /// rkey, a claimed usage.
    lie: (u64, u64, u32, u8),
    ops: Vec<Op>,
}

fn flags(bits: u32) -> CompletionFlags {
    CompletionFlags::from_bits_retain(bits)
}

#[track_caller]
fn documented(r: rpma::Result<()>) {
    if let Err(e) = r {
        assert!(
            matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::Unsupported | ErrorKind::Provider),
            "undocumented: {e}"
        );
    }
}

fuzz_target!(|input: Input| {
    let f = MockFabric::new();
    let dev = Device::lookup(&f, ADDR, ContextType::Local).unwrap();
    let (speer, cpeer) = (Peer::new(&dev).unwrap(), Peer::new(&dev).unwrap());
    let ep = Ep::listen(&speer, ADDR, PORT).unwrap();
    let client = ConnReq::new(&cpeer, ADDR, PORT, None).unwrap().connect(None).unwrap();
    let server = ep.next_conn_req(None).unwrap().connect(None).unwrap();
    assert_eq!(client.next_event().unwrap(), ConnEvent::Established);
    assert_eq!(server.next_event().unwrap(), ConnEvent::Established);

    let reg = |p: &Peer, len: u16, usage: u16| match p
        .alloc_mr(usize::from(len), Usage::from_bits_retain(u32::from(usage)))
    {
        Ok(m) => Some(m),
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
            None
        }
    };
    let (Some(mut local), Some(target)) =
        (reg(&cpeer, input.local_len, input.local_usage), reg(&speer, input.target_len, input.target_usage))
    else {
        return;
    };
    // A message buffer on the server, and the client's region filled with a known byte.
    let rbuf = speer.alloc_mr(4096, Usage::RECV).unwrap();
    local.volatile().fill(0x5A);
    let honest = MrRemote::from_descriptor(&target.descriptor()).unwrap();
    let d = MrDescriptor::decode(&target.descriptor()).unwrap();
    let (ax, len, kx, usage) = input.lie;
    let lying = MrRemote::from_descriptor(
        &MrDescriptor { addr: d.addr ^ ax, len, rkey: d.rkey ^ kx, usage: usage.max(1) }.encode(),
    )
    .unwrap();
    let remote = |l: bool| if l { &lying } else { &honest };
    // The lowest and highest byte of the client region a read may have written.
    let mut read_span: Option<(usize, usize)> = None;
    let untouched = |local: &[u8], span: Option<(usize, usize)>| {
        for (i, b) in local.iter().enumerate() {
            if span.is_none_or(|(lo, hi)| i < lo || i >= hi) {
                assert_eq!(*b, 0x5A, "client byte {i} changed outside every read");
            }
        }
    };
    let mut wcs = [Wc::EMPTY; 16];
    for (i, op) in input.ops.iter().take(64).enumerate() {
        let id = i as u64;
        match *op {
            Op::Read { dst, src, src_off, flags: fl } => {
                let r =
                    client.read(dst.local(&local), remote(src).at(src_off.get())).flags(flags(fl)).context(id).post();
                if r.is_ok() {
                    let (lo, hi) = dst.bounds(local.len());
                    assert!(lo <= hi && hi <= local.len(), "an accepted read range {lo}..{hi} of {}", local.len());
                    if lo < hi {
                        read_span = Some(read_span.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
                    }
                }
                documented(r);
            }
            Op::ReadEmpty { flags: fl } => documented(client.read_empty().flags(flags(fl)).context(id).post()),
            Op::Write { dst, dst_off, src, flags: fl, imm } => {
                let w = client.write(remote(dst).at(dst_off.get()), src.local(&local)).flags(flags(fl)).context(id);
                documented(match imm {
                    None => w.post(),
                    Some(v) => w.imm(v).post(),
                });
            }
            Op::WriteEmpty { flags: fl, imm } => {
                let w = client.write_empty().flags(flags(fl)).context(id);
                documented(match imm {
                    None => w.post(),
                    Some(v) => w.imm(v).post(),
                });
            }
            Op::AtomicWrite { dst, off, flags: fl } => {
                documented(
                    client.atomic_write(remote(dst).at(off.get()), [0xC3; 8]).flags(flags(fl)).context(id).post(),
                );
            }
            Op::Flush { dst, range, persistent, flags: fl } => {
                let t = if persistent { FlushType::Persistent } else { FlushType::Visibility };
                documented(client.flush(range.remote(remote(dst)), t).flags(flags(fl)).context(id).post());
            }
            Op::Send { src, flags: fl, imm } => {
                let s = match src {
                    Some(r) => client.send(r.local(&local)),
                    None => client.send_empty(),
                }
                .flags(flags(fl))
                .context(id);
                documented(match imm {
                    None => s.post(),
                    Some(v) => s.imm(v).post(),
                });
            }
            Op::Recv { dst } => documented(
                match dst {
                    Some(r) => server.recv(r.local(&rbuf)),
                    None => server.recv_empty(),
                }
                .context(id)
                .post(),
            ),
            Op::Poll { server: s, n } => {
                let cq = if s { server.cq() } else { client.cq() };
                let n = usize::from(n) % wcs.len();
                match cq.poll(&mut wcs[..n]) {
                    Ok(got) => assert!(n > 0 && got <= n, "{got} completions for {n} entries"),
                    Err(e) => assert!(
                        matches!(e.kind(), ErrorKind::InvalidInput if n == 0) || e.kind() == ErrorKind::Provider,
                        "{e}"
                    ),
                }
            }
            Op::MutSlice => {
                let remote_access = local.remote_access();
                match local.as_mut_slice() {
                    Ok(bytes) => {
                        assert!(!remote_access, "a plain slice of a region a peer may reach");
                        untouched(bytes, read_span);
                    }
                    Err(e) if e.kind() == ErrorKind::InvalidInput => assert!(remote_access, "{e}"),
                    Err(e) => assert_eq!(e.kind(), ErrorKind::WouldBlock, "{e}"),
                }
            }
            Op::ApplyPeerCfg(on) => client.apply_remote_peer_cfg(&PeerCfg::new().with_direct_write_to_pmem(on)),
        }
    }
    // Bytes of the client region no successful read covered are as filled.
    untouched(&local.to_vec(0, local.len()).unwrap(), read_span);
});
