//! The Rust side of the wire-interop protocol (README.md in this directory): the same server and
//! client as `peer.c`, written against rpma-rs and generic over the transport.
//!
//! Every function returns `Err(message)` on the first mismatch or error; the caller prints it
//! with a `FAIL` prefix and exits 1.

use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use rpma::{
    CompletionFlags, Conn, ConnEvent, ConnReq, ContextType, Device, Ep, FlushType, MrLocal, MrRemote, Peer, PeerCfg,
    Transport, Usage, Wc, WcOpcode,
};

/// Bytes of each region (the size both sides expect in the other's descriptor).
pub const MEM_LEN: usize = 4096;
/// Bytes of every protocol message.
pub const MSG_LEN: usize = 32;
/// Private data sent by both sides: MR descriptor + peer-config descriptor.
pub const PDATA_LEN: usize = MrRemote::DESCRIPTOR_SIZE + PeerCfg::DESCRIPTOR_SIZE;
const CHUNK: usize = 256;

// server memory layout
const S_W1: usize = 0;
const S_W2: usize = 256;
const S_W3: usize = 512;
const S_ATOMIC: usize = 1024;
const S_PS: usize = 2048;
// client memory layout
const C_PC: usize = 0;
const C_SW: usize = 512;
const C_STAGE: usize = 1024;
const C_READ: usize = 2048;

// pattern tags
const T_PC: u8 = 1;
const T_SW: u8 = 2;
const T_W1: u8 = 3;
const T_W2: u8 = 4;
const T_PS: u8 = 5;
const T_W3: u8 = 6;
const T_ATOMIC: u8 = 7;

const IMM_SEND: u32 = 0x1234_5678;
const IMM_WRITE: u32 = 0x9abc_def0;

const STEPS: [&str; 7] = ["WRITE-VIS", "WRITE-PERS", "READ", "SEND-IMM", "WRITE-IMM", "ATOMIC", "BYE"];

/// How long one completion may take before the peer gives up (TCG guests are slow).
const OP_TIMEOUT: Duration = Duration::from_secs(60);

type Res<T> = Result<T, String>;

/// `RPMA_INTEROP_NO_PERSISTENT=1` (scripts/test-verbs.sh on debian13): no persistent usage and a
/// visibility flush in WRITE-PERS, as `peer.c` (librpma 1.3 cannot register persistent flush
/// access on memory that is not pmem where the device has native flush; docs/native-ops.md).
fn no_persistent() -> bool {
    pmem().is_none() && std::env::var("RPMA_INTEROP_NO_PERSISTENT").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// `RPMA_INTEROP_PMEM=/dev/daxN.M` and `RPMA_INTEROP_PMEM_OFFSET`: the server's data region on
/// that devdax range, as `peer.c`.
fn pmem() -> Option<(String, u64)> {
    let path = std::env::var("RPMA_INTEROP_PMEM").ok().filter(|p| !p.is_empty())?;
    let off = std::env::var("RPMA_INTEROP_PMEM_OFFSET").ok().and_then(|o| o.parse().ok()).unwrap_or(0);
    Some((path, off))
}

/// The server's data region: zeroed, on pmem with `RPMA_INTEROP_PMEM`.
fn server_mem<T: Transport>(peer: &Peer<T>) -> Res<MrLocal<T>> {
    let Some((path, off)) = pmem() else {
        return alloc(peer, MEM_LEN, usage_server());
    };
    let opts = rpma::mem::MapOptions::new().offset(off).len(MEM_LEN).map_sync(rpma::mem::MapSync::Never);
    // SAFETY: [M5] a devdax device is never truncated; [M3] no slice of it is made while it is
    // registered.
    let m = unsafe { opts.map(&path) }.map_err(|e| format!("mapping {path} at {off}: {e}"))?;
    if m.kind() != rpma::mem::MemoryKind::DevDax {
        return Err(format!("RPMA_INTEROP_PMEM={path} is not a devdax device"));
    }
    m.volatile().write(0, &[0; MEM_LEN]).map_err(|e| format!("zeroing {path}: {e}"))?;
    println!("PMEM {path} at {off}");
    peer.reg_mr(m, usage_server()).map_err(ctx("Peer::reg_mr (pmem)"))
}

fn usage_server() -> Usage {
    let u = Usage::READ_SRC | Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY;
    if no_persistent() {
        u
    } else {
        u | Usage::FLUSH_TYPE_PERSISTENT
    }
}

fn usage_client() -> Usage {
    Usage::READ_SRC | Usage::READ_DST | Usage::WRITE_SRC | Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY
}

/// Byte `i` of the pattern `tag` (the same formula as `peer.c`).
fn pattern(tag: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (usize::from(tag) * 31 + i * 7 + 1) as u8).collect()
}

fn expect_bytes(what: &str, got: &[u8], want: &[u8]) -> Res<()> {
    if got.len() != want.len() {
        return Err(format!("{what}: {} bytes, expected {}", got.len(), want.len()));
    }
    match got.iter().zip(want).position(|(g, w)| g != w) {
        None => Ok(()),
        Some(i) => Err(format!("{what}: byte {i} is {:#04x}, expected {:#04x}", got[i], want[i])),
    }
}

fn ctx(what: &'static str) -> impl Fn(rpma::Error) -> String {
    move |e| format!("{what}: {e}")
}

/// Checks the other side's raw private data, then decodes it.
fn decode_pdata(pd: &[u8], want_usage: Usage, want_direct: bool) -> Res<(MrRemote, PeerCfg)> {
    if pd.len() < PDATA_LEN {
        return Err(format!("private data: {} bytes, expected at least {PDATA_LEN}", pd.len()));
    }
    let size = u64::from_le_bytes(pd[8..16].try_into().expect("8 bytes"));
    if size != MEM_LEN as u64 {
        return Err(format!("MR descriptor: size field {size}, expected {MEM_LEN}"));
    }
    if u32::from(pd[20]) != want_usage.bits() {
        return Err(format!("MR descriptor: usage byte {:#04x}, expected {:#04x}", pd[20], want_usage.bits()));
    }
    if pd[21] != u8::from(want_direct) {
        return Err(format!("peer-config descriptor: {:#04x}, expected {:#04x}", pd[21], u8::from(want_direct)));
    }
    let remote =
        MrRemote::from_descriptor(&pd[..MrRemote::DESCRIPTOR_SIZE]).map_err(ctx("MrRemote::from_descriptor"))?;
    if remote.len() != MEM_LEN as u64 || remote.usage() != want_usage {
        return Err(format!("decoded remote MR: {} bytes, usage {:?}", remote.len(), remote.usage()));
    }
    let pcfg =
        PeerCfg::from_descriptor(&pd[MrRemote::DESCRIPTOR_SIZE..PDATA_LEN]).map_err(ctx("PeerCfg::from_descriptor"))?;
    if pcfg.direct_write_to_pmem() != want_direct {
        return Err(format!(
            "peer config: direct_write_to_pmem {}, expected {want_direct}",
            pcfg.direct_write_to_pmem()
        ));
    }
    Ok((remote, pcfg))
}

fn encode_pdata<T: Transport>(mr: &MrLocal<T>, direct: bool) -> Vec<u8> {
    let pcfg = PeerCfg::new().with_direct_write_to_pmem(direct);
    let mut pd = mr.descriptor().to_vec();
    pd.extend_from_slice(&pcfg.descriptor());
    pd
}

/// One successful completion, waiting for it if the CQ is empty.
fn next_wc<T: Transport>(conn: &Conn<T>) -> Res<Wc> {
    let start = Instant::now();
    let cq = conn.cq();
    loop {
        match cq.next_wc() {
            Ok(Some(wc)) if wc.is_success() => return Ok(wc),
            Ok(Some(wc)) => return Err(format!("completion of op {}: status {:?}", wc.wr_id(), wc.status())),
            Ok(None) => {
                // Bounded: a vanished peer must not leave us blocked forever.
                let left = OP_TIMEOUT.saturating_sub(start.elapsed());
                let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
                let mut fds = [PollFd::new(cq.fd(), PollFlags::POLLIN)];
                match poll(&mut fds, PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)) {
                    Ok(0) => return Err(format!("no completion within {OP_TIMEOUT:?}")),
                    Ok(_) => cq.wait().map_err(ctx("Cq::wait"))?,
                    Err(e) => return Err(format!("poll on the CQ fd: {e}")),
                }
            }
            Err(e) => return Err(format!("Cq::next_wc: {e}")),
        }
    }
}

/// Waits for the completions of ops `1..=accept.len()` (any order); op `i`'s opcode must be one
/// of `accept[i - 1]`. Returns them indexed by op.
fn await_ops<T: Transport>(conn: &Conn<T>, accept: &[&[WcOpcode]]) -> Res<Vec<Wc>> {
    let mut got: Vec<Option<Wc>> = vec![None; accept.len()];
    for _ in 0..accept.len() {
        let wc = next_wc(conn)?;
        let i = usize::try_from(wc.wr_id()).unwrap_or(0);
        if i == 0 || i > accept.len() || got[i - 1].is_some() {
            return Err(format!("unexpected completion of op {} ({:?})", wc.wr_id(), wc.opcode()));
        }
        if !accept[i - 1].contains(&wc.opcode()) {
            return Err(format!("op {i} completed with {:?}, expected one of {:?}", wc.opcode(), accept[i - 1]));
        }
        got[i - 1] = Some(wc);
    }
    Ok(got.into_iter().map(|w| w.expect("every op completed")).collect())
}

fn expect_event<T: Transport>(conn: &Conn<T>, want: ConnEvent) -> Res<()> {
    match conn.next_event() {
        Ok(ev) if ev == want => Ok(()),
        Ok(ev) => Err(format!("connection event {ev:?}, expected {want:?}")),
        Err(e) => Err(format!("Conn::next_event: {e}")),
    }
}

/// Message buffer: `[0, 32)` receive slot, `[32, 64)` send slot.
fn set_msg<T: Transport>(msg: &MrLocal<T>, text: &str) -> Res<()> {
    let mut buf = [0u8; MSG_LEN];
    buf[..text.len()].copy_from_slice(text.as_bytes());
    msg.write(MSG_LEN, &buf).map_err(ctx("MrLocal::write"))
}

fn get_msg<T: Transport>(msg: &MrLocal<T>) -> Res<String> {
    let raw = msg.to_vec(0, MSG_LEN).map_err(ctx("MrLocal::to_vec"))?;
    let end = raw.iter().position(|&b| b == 0).unwrap_or(MSG_LEN);
    Ok(String::from_utf8_lossy(&raw[..end]).into_owned())
}

fn new_peer<T: Transport>(transport: &T, addr: &str, kind: ContextType) -> Res<Peer<T>> {
    let dev = Device::lookup(transport, addr, kind).map_err(|e| format!("Device::lookup({addr}): {e}"))?;
    Peer::new(&dev).map_err(ctx("Peer::new"))
}

fn alloc<T: Transport>(peer: &Peer<T>, len: usize, usage: Usage) -> Res<MrLocal<T>> {
    peer.alloc_mr(len, usage).map_err(ctx("Peer::alloc_mr"))
}

/// The server: listens on `addr:port`, prints `LISTENING`, serves one connection.
///
/// # Errors
/// The first failed check or operation.
pub fn server<T: Transport>(transport: &T, addr: &str, port: &str) -> Res<()> {
    let peer = new_peer(transport, addr, ContextType::Local)?;
    let mem = server_mem(&peer)?;
    let scratch = alloc(&peer, MEM_LEN, Usage::READ_DST | Usage::WRITE_SRC)?;
    let msg = alloc(&peer, 2 * MSG_LEN, Usage::SEND | Usage::RECV)?;
    mem.write(S_PS, &pattern(T_PS, CHUNK)).map_err(ctx("MrLocal::write"))?;
    let mut expected = mem.to_vec(0, MEM_LEN).map_err(ctx("MrLocal::to_vec"))?;
    let pdata = encode_pdata(&mem, true);

    let ep = Ep::listen(&peer, addr, port).map_err(ctx("Ep::listen"))?;
    println!("LISTENING");
    let req = ep.next_conn_req(None).map_err(ctx("Ep::next_conn_req"))?;
    let (cmem, _) = decode_pdata(req.private_data(), usage_client(), false)?;
    req.recv(msg.slice(0..MSG_LEN)).context(1).post().map_err(ctx("ConnReq::recv"))?;
    let conn = req.connect(Some(&pdata)).map_err(ctx("ConnReq::connect"))?;
    expect_event(&conn, ConnEvent::Established)?;

    // RDY: read the client's pattern, write ours into its memory, flush, then tell it.
    scratch.write(256, &pattern(T_SW, CHUNK)).map_err(ctx("MrLocal::write"))?;
    conn.read(scratch.slice(0..CHUNK), cmem.at(C_PC)).context(2).post().map_err(ctx("Conn::read"))?;
    conn.write(cmem.at(C_SW), scratch.slice(256..256 + CHUNK))
        .flags(CompletionFlags::ON_ERROR)
        .context(3)
        .post()
        .map_err(ctx("Conn::write"))?;
    conn.flush(cmem.slice(C_SW..C_SW + CHUNK), FlushType::Visibility).context(4).post().map_err(ctx("Conn::flush"))?;
    for _ in 0..2 {
        let wc = next_wc(&conn)?;
        let ok = match wc.wr_id() {
            2 => wc.opcode() == WcOpcode::RdmaRead,
            4 => matches!(wc.opcode(), WcOpcode::RdmaRead | WcOpcode::Flush),
            _ => false,
        };
        if !ok {
            return Err(format!("RDY: unexpected completion of op {} ({:?})", wc.wr_id(), wc.opcode()));
        }
    }
    expect_bytes(
        "RDY: the client's memory as read by the server",
        &scratch.to_vec(0, CHUNK).map_err(ctx("MrLocal::to_vec"))?,
        &pattern(T_PC, CHUNK),
    )?;
    set_msg(&msg, "RDY")?;
    conn.send(msg.slice(MSG_LEN..2 * MSG_LEN)).context(5).post().map_err(ctx("Conn::send"))?;
    let mut sends = 1;

    for (step, want_tag) in STEPS.iter().enumerate() {
        let wc = loop {
            let wc = next_wc(&conn)?;
            if wc.opcode() == WcOpcode::Send && wc.wr_id() == 5 {
                sends -= 1;
                continue;
            }
            break wc;
        };
        if wc.wr_id() != 1 {
            return Err(format!("step {want_tag}: unexpected completion of op {} ({:?})", wc.wr_id(), wc.opcode()));
        }
        let tag = match wc.opcode() {
            WcOpcode::RecvRdmaWithImm => {
                if wc.imm_data() != Some(IMM_WRITE) {
                    return Err(format!("WRITE-IMM: imm {:x?}, expected {IMM_WRITE:#010x}", wc.imm_data()));
                }
                "WRITE-IMM".to_owned()
            }
            WcOpcode::Recv => {
                if wc.byte_len() as usize != MSG_LEN {
                    return Err(format!("step {want_tag}: message of {} bytes, expected {MSG_LEN}", wc.byte_len()));
                }
                let tag = get_msg(&msg)?;
                let want_imm = (tag == "SEND-IMM").then_some(IMM_SEND);
                if wc.imm_data() != want_imm {
                    return Err(format!("step {tag}: imm {:x?}, expected {want_imm:x?}", wc.imm_data()));
                }
                tag
            }
            other => return Err(format!("step {want_tag}: unexpected opcode {other:?}")),
        };
        if tag != *want_tag {
            return Err(format!("got step {tag:?}, expected {want_tag:?}"));
        }
        match *want_tag {
            "WRITE-VIS" => expected[S_W1..S_W1 + CHUNK].copy_from_slice(&pattern(T_W1, CHUNK)),
            "WRITE-PERS" => expected[S_W2..S_W2 + CHUNK].copy_from_slice(&pattern(T_W2, CHUNK)),
            "WRITE-IMM" => expected[S_W3..S_W3 + CHUNK].copy_from_slice(&pattern(T_W3, CHUNK)),
            "ATOMIC" => expected[S_ATOMIC..S_ATOMIC + 8].copy_from_slice(&pattern(T_ATOMIC, 8)),
            _ => {}
        }
        expect_bytes(
            &format!("{tag}: server memory"),
            &mem.to_vec(0, MEM_LEN).map_err(ctx("MrLocal::to_vec"))?,
            &expected,
        )?;
        println!("rust-server: {tag} ok");

        // A receive for the next step, then the reply (once the previous send has completed).
        while sends > 0 {
            let wc = next_wc(&conn)?;
            if wc.opcode() != WcOpcode::Send || wc.wr_id() != 5 {
                return Err(format!("unexpected completion of op {} ({:?})", wc.wr_id(), wc.opcode()));
            }
            sends -= 1;
        }
        if step + 1 < STEPS.len() {
            conn.recv(msg.slice(0..MSG_LEN)).context(1).post().map_err(ctx("Conn::recv"))?;
        }
        set_msg(&msg, &format!("OK {tag}"))?;
        conn.send(msg.slice(MSG_LEN..2 * MSG_LEN)).context(5).post().map_err(ctx("Conn::send"))?;
        sends += 1;
    }
    while sends > 0 {
        let wc = next_wc(&conn)?;
        if wc.opcode() != WcOpcode::Send || wc.wr_id() != 5 {
            return Err(format!("unexpected completion of op {} ({:?})", wc.wr_id(), wc.opcode()));
        }
        sends -= 1;
    }
    expect_event(&conn, ConnEvent::Closed)?;
    conn.disconnect().map_err(ctx("Conn::disconnect"))?;
    conn.delete().map_err(ctx("Conn::delete"))?;
    ep.shutdown().map_err(ctx("Ep::shutdown"))?;
    println!("rust-server: PASS");
    Ok(())
}

/// Posts the reply's receive (op 1), sends the step's message (op 2, with `imm` if given) and
/// checks the reply.
fn step_exchange<T: Transport>(conn: &Conn<T>, msg: &MrLocal<T>, tag: &str, imm: Option<u32>) -> Res<()> {
    conn.recv(msg.slice(0..MSG_LEN)).context(1).post().map_err(ctx("Conn::recv"))?;
    set_msg(msg, tag)?;
    match imm {
        Some(imm) => conn.send(msg.slice(MSG_LEN..2 * MSG_LEN)).imm(imm).context(2).post(),
        None => conn.send(msg.slice(MSG_LEN..2 * MSG_LEN)).context(2).post(),
    }
    .map_err(ctx("Conn::send"))?;
    let wcs = await_ops(conn, &[&[WcOpcode::Recv], &[WcOpcode::Send]])?;
    let reply = get_msg(msg)?;
    if wcs[0].byte_len() as usize != MSG_LEN || reply != format!("OK {tag}") {
        return Err(format!("{tag}: reply {reply:?} ({} bytes), expected \"OK {tag}\"", wcs[0].byte_len()));
    }
    println!("rust-client: {tag} ok");
    Ok(())
}

/// The client: connects to `addr:port` and runs every step.
///
/// # Errors
/// The first failed check or operation.
pub fn client<T: Transport>(transport: &T, addr: &str, port: &str) -> Res<()> {
    let peer = new_peer(transport, addr, ContextType::Remote)?;
    let mem = alloc(&peer, MEM_LEN, usage_client())?;
    let msg = alloc(&peer, 2 * MSG_LEN, Usage::SEND | Usage::RECV)?;
    mem.write(C_PC, &pattern(T_PC, CHUNK)).map_err(ctx("MrLocal::write"))?;
    let pdata = encode_pdata(&mem, false);

    let req = ConnReq::new(&peer, addr, port, None).map_err(ctx("ConnReq::new"))?;
    req.recv(msg.slice(0..MSG_LEN)).context(1).post().map_err(ctx("ConnReq::recv"))?;
    let conn = req.connect(Some(&pdata)).map_err(ctx("ConnReq::connect"))?;
    expect_event(&conn, ConnEvent::Established)?;
    let (smem, spcfg) = decode_pdata(conn.private_data(), usage_server(), true)?;
    conn.apply_remote_peer_cfg(&spcfg);

    // RDY
    let wc = next_wc(&conn)?;
    let text = get_msg(&msg)?;
    if wc.wr_id() != 1 || wc.opcode() != WcOpcode::Recv || wc.byte_len() as usize != MSG_LEN || text != "RDY" {
        return Err(format!("RDY: op {} {:?}, {} bytes {text:?}", wc.wr_id(), wc.opcode(), wc.byte_len()));
    }
    let mut want = vec![0u8; MEM_LEN];
    want[C_PC..C_PC + CHUNK].copy_from_slice(&pattern(T_PC, CHUNK));
    want[C_SW..C_SW + CHUNK].copy_from_slice(&pattern(T_SW, CHUNK));
    expect_bytes(
        "RDY: client memory after the server's write",
        &mem.to_vec(0, MEM_LEN).map_err(ctx("MrLocal::to_vec"))?,
        &want,
    )?;
    println!("rust-client: RDY ok");

    let flush_done: &[WcOpcode] = &[WcOpcode::RdmaRead, WcOpcode::Flush];
    for (tag, offset, pat, flush_type) in [
        ("WRITE-VIS", S_W1, T_W1, FlushType::Visibility),
        ("WRITE-PERS", S_W2, T_W2, if no_persistent() { FlushType::Visibility } else { FlushType::Persistent }),
    ] {
        mem.write(C_STAGE, &pattern(pat, CHUNK)).map_err(ctx("MrLocal::write"))?;
        conn.write(smem.at(offset), mem.slice(C_STAGE..C_STAGE + CHUNK))
            .flags(CompletionFlags::ON_ERROR)
            .context(9)
            .post()
            .map_err(ctx("Conn::write"))?;
        conn.flush(smem.slice(offset..offset + CHUNK), flush_type).context(1).post().map_err(ctx("Conn::flush"))?;
        await_ops(&conn, &[flush_done])?;
        step_exchange(&conn, &msg, tag, None)?;
    }

    conn.read(mem.slice(C_READ..C_READ + CHUNK), smem.at(S_PS)).context(1).post().map_err(ctx("Conn::read"))?;
    await_ops(&conn, &[&[WcOpcode::RdmaRead]])?;
    expect_bytes(
        "READ: the server's pattern",
        &mem.to_vec(C_READ, CHUNK).map_err(ctx("MrLocal::to_vec"))?,
        &pattern(T_PS, CHUNK),
    )?;
    step_exchange(&conn, &msg, "READ", None)?;

    step_exchange(&conn, &msg, "SEND-IMM", Some(IMM_SEND))?;

    // WRITE-IMM: the write with imm is the step's message.
    mem.write(C_STAGE, &pattern(T_W3, CHUNK)).map_err(ctx("MrLocal::write"))?;
    conn.recv(msg.slice(0..MSG_LEN)).context(1).post().map_err(ctx("Conn::recv"))?;
    conn.write(smem.at(S_W3), mem.slice(C_STAGE..C_STAGE + CHUNK))
        .imm(IMM_WRITE)
        .context(2)
        .post()
        .map_err(ctx("Conn::write_with_imm"))?;
    await_ops(&conn, &[&[WcOpcode::Recv], &[WcOpcode::RdmaWrite]])?;
    let reply = get_msg(&msg)?;
    if reply != "OK WRITE-IMM" {
        return Err(format!("WRITE-IMM: reply {reply:?}"));
    }
    println!("rust-client: WRITE-IMM ok");

    let value: [u8; 8] = pattern(T_ATOMIC, 8).try_into().expect("8 bytes");
    conn.atomic_write(smem.at(S_ATOMIC), value).context(1).post().map_err(ctx("Conn::atomic_write"))?;
    conn.flush(smem.slice(S_ATOMIC..S_ATOMIC + 8), FlushType::Visibility)
        .context(2)
        .post()
        .map_err(ctx("Conn::flush"))?;
    await_ops(&conn, &[&[WcOpcode::RdmaWrite, WcOpcode::AtomicWrite], flush_done])?;
    step_exchange(&conn, &msg, "ATOMIC", None)?;

    step_exchange(&conn, &msg, "BYE", None)?;
    conn.disconnect().map_err(ctx("Conn::disconnect"))?;
    expect_event(&conn, ConnEvent::Closed)?;
    conn.delete().map_err(ctx("Conn::delete"))?;
    println!("rust-client: PASS");
    Ok(())
}
