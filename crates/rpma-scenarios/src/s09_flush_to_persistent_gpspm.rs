//! 09-flush-to-persistent-GPSPM (general-purpose server persistency method): the client writes
//! its hello string into the server's memory, then sends a flush request message
//! (`GPSPM_flush_request { fixed64 offset = 1; fixed64 length = 2; fixed64 op_context = 3; }`,
//! protobuf); the server persists that range itself (`pmem_persist`; here: writes it to its file)
//! and replies `GPSPM_flush_response { fixed64 op_context = 1; }`. Message slots: send at 0,
//! receive at 512 (`MSG_SIZE_MAX = 512`) of a 1 KiB region; receives complete on a receive CQ of
//! size 1. Needs no direct write to PMem. With `shared = true` it is 09scch: both CQs on one
//! completion channel.

use anyhow::{bail, ensure, Context, Result};
use rpma::{CompletionFlags, Conn, ConnCfg, Ep, MrRemote, Transport, Usage, Wc, WcOpcode};

use super::common::{
    accept, check_wc, client_peer, connect, disconnect_and_wait_close, init_hello, next_wc_shared, server_peer,
    translate, wait_close_and_disconnect, wait_wc, Mem, FLUSH_ID, HELLO_STR_OFFSET, HELLO_STR_SIZE, HELLO_T_SIZE,
};
use super::promise::Promise;
use super::{run_pair, side, ClientOpts, DemoEnv, Report, ServerOpts};
use crate::native::{OpUse, OpWatch};
use crate::pdata::CommonData;

/// `MSG_SIZE_MAX`.
pub const MSG_SIZE_MAX: usize = 512;
/// `SEND_OFFSET`.
pub const SEND_OFFSET: usize = 0;
/// `RECV_OFFSET`.
pub const RECV_OFFSET: usize = SEND_OFFSET + MSG_SIZE_MAX;
/// `RCQ_SIZE`.
pub const RCQ_SIZE: u32 = 1;

/// A GPSPM flush request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlushRequest {
    /// Offset of the range inside the server's region.
    pub offset: u64,
    /// Length of the range.
    pub length: u64,
    /// The client's operation context.
    pub op_context: u64,
}

fn put_fixed64(out: &mut Vec<u8>, field: u8, v: u64) {
    out.push(field << 3 | 1);
    out.extend_from_slice(&v.to_le_bytes());
}

/// Decodes the `fixed64` fields `1..=N` of a protobuf message; other fields are skipped.
fn fixed64_fields<const N: usize>(msg: &[u8]) -> Result<[Option<u64>; N]> {
    let mut out = [None; N];
    let mut i = 0;
    let varint = |i: &mut usize| -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *msg.get(*i).context("truncated message")?;
            *i += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        bail!("malformed varint")
    };
    while i < msg.len() {
        let key = varint(&mut i)?;
        let (field, wire) = (key >> 3, key & 7);
        let skip = match wire {
            0 => {
                varint(&mut i)?;
                0
            }
            1 => 8,
            2 => usize::try_from(varint(&mut i)?)?,
            5 => 4,
            _ => bail!("unsupported wire type {wire}"),
        };
        let bytes = msg.get(i..i.checked_add(skip).context("bad length")?).context("truncated message")?;
        if wire == 1 && (1..=N as u64).contains(&field) {
            out[field as usize - 1] = Some(u64::from_le_bytes(bytes.try_into()?));
        }
        i += skip;
    }
    Ok(out)
}

impl FlushRequest {
    /// The packed protobuf message (27 bytes).
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(27);
        put_fixed64(&mut v, 1, self.offset);
        put_fixed64(&mut v, 2, self.length);
        put_fixed64(&mut v, 3, self.op_context);
        v
    }

    /// Unpacks a received message (untrusted).
    ///
    /// # Errors
    /// If it is malformed or a required field is missing.
    pub fn decode(msg: &[u8]) -> Result<Self> {
        let [o, l, c] = fixed64_fields::<3>(msg)?;
        match (o, l, c) {
            (Some(offset), Some(length), Some(op_context)) => Ok(Self { offset, length, op_context }),
            _ => bail!("flush request without a required field"),
        }
    }
}

/// Packs `GPSPM_flush_response` (9 bytes).
#[must_use]
pub fn encode_response(op_context: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(9);
    put_fixed64(&mut v, 1, op_context);
    v
}

/// Unpacks `GPSPM_flush_response`.
///
/// # Errors
/// If it is malformed or the field is missing.
pub fn decode_response(msg: &[u8]) -> Result<u64> {
    fixed64_fields::<1>(msg)?[0].context("flush response without op_context")
}

/// The server's report.
#[derive(Debug, Clone)]
pub struct ServerReport {
    /// The value before the client wrote (empty if none).
    pub old: String,
    /// The request received.
    pub request: FlushRequest,
    /// The value after the client disconnected.
    pub new: String,
    /// What the file held at that moment, before deregistration (with a file).
    pub in_file: Option<String>,
}

impl Report for ServerReport {
    fn lines(&self) -> Vec<String> {
        let r = &self.request;
        let mut v = Vec::new();
        if !self.old.is_empty() {
            v.push(format!("old value {:?}", self.old));
        }
        let how = if self.in_file.is_some() { "persisted it to its file" } else { "DRAM: nothing to persist" };
        v.push(format!(
            "flush request {{offset: {:#x}, length: {:#x}, op_context: {:#x}}}: {how}, replied",
            r.offset, r.length, r.op_context
        ));
        v.push(format!("new value {:?}", self.new));
        if let Some(f) = &self.in_file {
            v.push(format!("the file held {f:?} before deregistration"));
        }
        v
    }
}

/// The client's report.
#[derive(Debug, Clone)]
pub struct ClientReport {
    /// The value written.
    pub written: String,
    /// The remote offset written at.
    pub offset: usize,
    /// The response's operation context.
    pub response: u64,
    /// The RDMA flushes and atomic writes posted (none: the flush is a message).
    pub ops: OpUse,
    /// Its own hello after translation.
    pub translation: String,
}

impl Report for ClientReport {
    fn lines(&self) -> Vec<String> {
        vec![
            format!("wrote {:?} at remote offset {} and sent a flush request", self.written, self.offset),
            format!("path: GPSPM, the server persists on request; {}", self.ops.describe()),
            format!("flush response op_context {:#x}; translated its hello to {:?}", self.response, self.translation),
        ]
    }
}

fn cfg<T: Transport>(shared: bool) -> ConnCfg<T> {
    ConnCfg::new().with_rcq_size(RCQ_SIZE).with_shared_channel(shared)
}

/// The next completion on the main CQ (`rcq = false`) or the receive CQ, of `expected` opcode.
fn wait_on<T: Transport>(conn: &Conn<T>, rcq: bool, expected: WcOpcode, shared: bool) -> Result<Wc> {
    if shared {
        let (wc, from_rcq) = next_wc_shared(conn)?;
        ensure!(from_rcq == rcq, "a {:?} completion on the wrong CQ", wc.opcode());
        check_wc(&wc, expected)?;
        return Ok(wc);
    }
    if rcq {
        wait_wc(&conn.rcq().context("the connection has no receive CQ")?, expected)
    } else {
        wait_wc(&conn.cq(), expected)
    }
}

/// The client's two completions: its request's send (main CQ) and the response's receive
/// (receive CQ); returns the receive's. On one shared channel they come in either order:
/// nothing orders completions of two CQs (rxe on Linux 6.12 may complete the response's
/// receive before the acknowledgement of the request).
fn wait_request_and_response<T: Transport>(conn: &Conn<T>, shared: bool) -> Result<Wc> {
    if !shared {
        wait_on(conn, false, WcOpcode::Send, false)?;
        return wait_on(conn, true, WcOpcode::Recv, false);
    }
    let (mut sent, mut response) = (false, None);
    while !sent || response.is_none() {
        let (wc, from_rcq) = next_wc_shared(conn)?;
        if from_rcq {
            ensure!(response.is_none(), "a second completion on the receive CQ: {:?}", wc.opcode());
            check_wc(&wc, WcOpcode::Recv)?;
            response = Some(wc);
        } else {
            ensure!(!sent, "a second completion on the main CQ: {:?}", wc.opcode());
            check_wc(&wc, WcOpcode::Send)?;
            sent = true;
        }
    }
    response.context("no response")
}

/// The server side (`--file`: its memory).
///
/// # Errors
/// If any step fails or the request's range is outside the region.
pub fn server<T: Transport>(t: &T, o: &ServerOpts, shared: bool) -> Result<ServerReport> {
    let peer = server_peer(t, &o.addr)?;
    let flush = if o.file.is_some() { Usage::FLUSH_TYPE_PERSISTENT } else { Usage::FLUSH_TYPE_VISIBILITY };
    let mem = Mem::new(&peer, o.file_source(), HELLO_STR_SIZE, Usage::WRITE_DST | flush, None)?;
    let old = mem.string_at(mem.data_offset, HELLO_STR_SIZE)?;
    let ep = Ep::listen(&peer, &o.addr, &o.port)?;
    o.ready.signal();
    let msg = peer.alloc_mr(HELLO_STR_SIZE, Usage::SEND | Usage::RECV | Usage::FLUSH_TYPE_VISIBILITY)?;
    let pdata = CommonData::new(u16::try_from(mem.data_offset)?, &mem.mr.descriptor()).encode()?;
    let cfg = cfg(shared);
    let conn = accept(&ep, &o.stop, Some(&cfg), Some(&pdata), |req| {
        Ok(req.recv(msg.slice(RECV_OFFSET..RECV_OFFSET + MSG_SIZE_MAX)).post()?)
    })?;
    let wc = wait_on(&conn, true, WcOpcode::Recv, shared)?;
    let len = (wc.byte_len() as usize).min(MSG_SIZE_MAX);
    let request = FlushRequest::decode(&msg.to_vec(RECV_OFFSET, len)?)?;
    let in_range = request.offset.checked_add(request.length).is_some_and(|end| end <= mem.mr.len() as u64);
    ensure!(in_range, "flush request outside the region: {request:?}");
    mem.persist(usize::try_from(request.offset)?, usize::try_from(request.length)?)?;
    let resp = encode_response(request.op_context);
    msg.write(SEND_OFFSET, &resp)?;
    conn.send(msg.slice(SEND_OFFSET..SEND_OFFSET + resp.len())).post()?;
    wait_on(&conn, false, WcOpcode::Send, shared)?;
    wait_close_and_disconnect(conn)?;
    let new = mem.string_at(mem.data_offset, HELLO_STR_SIZE)?;
    let in_file =
        mem.path().map(|p| super::common::file_string(p, o.file_offset, mem.data_offset, o.map_file)).transpose()?;
    mem.dereg()?;
    msg.dereg()?;
    ep.shutdown()?;
    Ok(ServerReport { old, request, new, in_file })
}

/// The client side (`--file`: its hello structure).
///
/// # Errors
/// If any step fails, the remote region is too small or the response does not match.
pub fn client<T: Transport>(t: &T, o: &ClientOpts, shared: bool) -> Result<ClientReport> {
    let peer = client_peer(t, &o.addr)?;
    let mem = Mem::new(&peer, o.file_source(), HELLO_T_SIZE, Usage::WRITE_SRC, Some(&init_hello))?;
    let written = mem.string_at(mem.data_offset + HELLO_STR_OFFSET, HELLO_STR_SIZE)?;
    let msg = peer.alloc_mr(HELLO_STR_SIZE, Usage::SEND | Usage::RECV)?;
    let cfg = cfg(shared);
    let conn = connect(&peer, &o.addr, &o.port, Some(&cfg), None, o.retries, o.retry_delay)?;
    let cd = CommonData::decode(conn.private_data())?;
    let dst = MrRemote::from_descriptor(&cd.mr_desc)?;
    let offset = usize::from(cd.data_offset);
    ensure!(
        usize::try_from(dst.len())?.saturating_sub(offset) >= HELLO_STR_SIZE,
        "size of the remote memory region is too small for writing the data of the assumed size ({} < {HELLO_STR_SIZE})",
        dst.len().saturating_sub(offset as u64)
    );
    let src_off = mem.data_offset + HELLO_STR_OFFSET;
    let watch = OpWatch::start::<T>(peer.capabilities());
    conn.write(dst.at(offset), mem.mr.slice(src_off..src_off + HELLO_STR_SIZE))
        .flags(CompletionFlags::ON_ERROR)
        .post()?;
    conn.recv(msg.slice(RECV_OFFSET..RECV_OFFSET + MSG_SIZE_MAX)).post()?;
    let req = FlushRequest { offset: offset as u64, length: HELLO_STR_SIZE as u64, op_context: FLUSH_ID }.encode();
    msg.write(SEND_OFFSET, &req)?;
    conn.send(msg.slice(SEND_OFFSET..SEND_OFFSET + req.len())).post()?;
    let wc = wait_request_and_response(&conn, shared)?;
    let len = (wc.byte_len() as usize).min(MSG_SIZE_MAX);
    let response = decode_response(&msg.to_vec(RECV_OFFSET, len)?)?;
    ensure!(response == FLUSH_ID, "unexpected op_context value ({response:#x} != {FLUSH_ID:#x})");
    // The server persisted the range before it answered.
    o.promise(Promise::Bytes { offset, bytes: mem.mr.to_vec(src_off, HELLO_STR_SIZE)? });
    let ops = watch.finish::<T>(0, 0);
    let translation = translate(&mem.mr, mem.data_offset)?;
    mem.persist(mem.data_offset, HELLO_T_SIZE)?;
    disconnect_and_wait_close(conn)?;
    mem.dereg()?;
    msg.dereg()?;
    Ok(ClientReport { written, offset, response, ops, translation })
}

/// Both sides in one process (the server's memory a file in `env.dir`): the written value must
/// be in the file before the server deregisters its memory, made durable by the server on request.
/// With `shared`, 09scch: both sides wait for their completions on one completion channel.
///
/// # Errors
/// If a side fails or the file does not hold the value.
pub fn demo<T: Transport>(t: &T, env: &DemoEnv, shared: bool) -> Result<Vec<String>> {
    let (ts, tc) = (t.clone(), t.clone());
    let path = env.dir.join(if shared { "09scch-server.pmem" } else { "09-server.pmem" });
    let mut so = env.server();
    so.file = Some(path);
    let co = env.client();
    let (s, c) = run_pair(
        move |ready| server(&ts, &ServerOpts { ready, ..so }, shared),
        vec![Box::new(move || client(&tc, &co, shared))],
    )?;
    let want = FlushRequest { offset: c[0].offset as u64, length: HELLO_STR_SIZE as u64, op_context: FLUSH_ID };
    ensure!(s.request == want, "server got {:?}", s.request);
    ensure!(s.new == c[0].written, "server holds {:?}, client wrote {:?}", s.new, c[0].written);
    ensure!(s.in_file.as_deref() == Some(c[0].written.as_str()), "the file held {:?}", s.in_file);
    Ok([side("server", &s), side("client", &c[0])].concat())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protobuf_wire_format() {
        let r = FlushRequest { offset: 0x11, length: 0x400, op_context: 0xF01D };
        let b = r.encode();
        assert_eq!(b.len(), 27);
        assert_eq!(b[0], 0x09);
        assert_eq!(b[9], 0x11);
        assert_eq!(b[18], 0x19);
        assert_eq!(&b[19..21], &[0x1D, 0xF0]);
        assert_eq!(FlushRequest::decode(&b).unwrap(), r);
        // Fields in another order, plus an unknown varint field, still decode.
        let mut o = b[18..27].to_vec();
        o.extend_from_slice(&[0x20, 0x96, 0x01]);
        o.extend_from_slice(&b[..18]);
        assert_eq!(FlushRequest::decode(&o).unwrap(), r);
        assert!(FlushRequest::decode(&b[..26]).is_err());
        assert!(FlushRequest::decode(&b[..18]).is_err());
        assert_eq!(decode_response(&encode_response(7)).unwrap(), 7);
        assert!(decode_response(&[0x0B]).is_err());
    }
}
