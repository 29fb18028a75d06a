//! The validation of operation arguments against the mock: arbitrary regions (length, usage),
//! honest or lying remote descriptors, and sequences of read / write / write with imm / atomic
//! write / flush / send / send with imm / recv with arbitrary offsets, lengths and flags, mixed
//! with polls. Every call returns `Ok` or a documented error (`Inval`, `NoSupp`, or `Provider`
//! for a full queue); polling returns completions or `NoCompletion`; the client's bytes outside
//! what a read may write never change; nothing panics.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use rpma::descriptor::MrDescriptor;
use rpma::mock::MockFabric;
use rpma::{
    CompletionFlags, ConnEvent, ConnReq, ContextType, Device, Ep, ErrorKind, FlushType, MrRemote, Peer, PeerCfg, Usage,
    Wc,
};

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

#[derive(Arbitrary, Debug)]
enum Op {
    Read { dst: bool, dst_off: Num, src: Option<bool>, src_off: Num, len: Num, flags: u32 },
    Write { dst: Option<bool>, dst_off: Num, src: bool, src_off: Num, len: Num, flags: u32, imm: Option<u32> },
    AtomicWrite { dst: bool, off: Num, flags: u32 },
    Flush { dst: bool, off: Num, len: Num, persistent: bool, flags: u32 },
    Send { src: bool, off: Num, len: Num, flags: u32, imm: Option<u32> },
    Recv { dst: bool, off: Num, len: Num },
    Poll { server: bool, n: u8 },
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
        assert!(matches!(e.kind(), ErrorKind::Inval | ErrorKind::NoSupp | ErrorKind::Provider), "undocumented: {e}");
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
            assert_eq!(e.kind(), ErrorKind::Inval, "{e}");
            None
        }
    };
    let (Some(local), Some(target)) =
        (reg(&cpeer, input.local_len, input.local_usage), reg(&speer, input.target_len, input.target_usage))
    else {
        return;
    };
    // A message buffer on the server, and the client's region filled with a known byte.
    let rbuf = speer.alloc_mr(4096, Usage::RECV).unwrap();
    let fill = vec![0x5A; local.len()];
    local.write(0, &fill).unwrap();
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
    let mut wcs = [Wc::EMPTY; 16];
    for (i, op) in input.ops.iter().take(64).enumerate() {
        let id = i as u64;
        match *op {
            Op::Read { dst, dst_off, src, src_off, len, flags: fl } => {
                let r = client.read(
                    dst.then_some(&local),
                    dst_off.get(),
                    src.map(remote),
                    src_off.get(),
                    len.get(),
                    flags(fl),
                    id,
                );
                if r.is_ok() && dst && len.get() > 0 {
                    let (lo, hi) = (dst_off.get(), dst_off.get() + len.get());
                    read_span = Some(read_span.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
                }
                documented(r);
            }
            Op::Write { dst, dst_off, src, src_off, len, flags: fl, imm } => {
                let (dst, src) = (dst.map(remote), src.then_some(&local));
                documented(match imm {
                    None => client.write(dst, dst_off.get(), src, src_off.get(), len.get(), flags(fl), id),
                    Some(v) => {
                        client.write_with_imm(dst, dst_off.get(), src, src_off.get(), len.get(), flags(fl), v, id)
                    }
                });
            }
            Op::AtomicWrite { dst, off, flags: fl } => {
                documented(client.atomic_write(remote(dst), off.get(), [0xC3; 8], flags(fl), id));
            }
            Op::Flush { dst, off, len, persistent, flags: fl } => {
                let t = if persistent { FlushType::Persistent } else { FlushType::Visibility };
                documented(client.flush(remote(dst), off.get(), len.get(), t, flags(fl), id));
            }
            Op::Send { src, off, len, flags: fl, imm } => {
                let src = src.then_some(&local);
                documented(match imm {
                    None => client.send(src, off.get(), len.get(), flags(fl), id),
                    Some(v) => client.send_with_imm(src, off.get(), len.get(), flags(fl), v, id),
                });
            }
            Op::Recv { dst, off, len } => documented(server.recv(dst.then_some(&rbuf), off.get(), len.get(), id)),
            Op::Poll { server: s, n } => {
                let cq = if s { server.cq() } else { client.cq() };
                let n = usize::from(n) % wcs.len();
                match cq.get_wc(&mut wcs[..n]) {
                    Ok(got) => assert!(got >= 1 && got <= n),
                    Err(e) => assert!(
                        matches!(e.kind(), ErrorKind::NoCompletion | ErrorKind::Inval | ErrorKind::Provider),
                        "{e}"
                    ),
                }
            }
            Op::ApplyPeerCfg(on) => {
                let cfg = PeerCfg::new();
                cfg.set_direct_write_to_pmem(on);
                client.apply_remote_peer_cfg(&cfg);
            }
        }
    }
    // Bytes of the client region no successful read covered are as filled.
    let now = local.to_vec(0, local.len()).unwrap();
    for (i, b) in now.iter().enumerate() {
        if read_span.is_none_or(|(lo, hi)| i < lo || i >= hi) {
            assert_eq!(*b, 0x5A, "client byte {i} changed outside every read");
        }
    }
});
