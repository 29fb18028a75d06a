//! The frames two processes exchange over a connection's socket, and their strict decoding.
//!
//! A frame is `len: u32 LE` (the bytes after it, at most [`MAX_FRAME`]), a tag byte and the
//! tag's fields, little-endian. Decoding accepts nothing else: an unknown tag, a field cut
//! short, trailing bytes, a payload whose length disagrees with the request or a frame above
//! the limit is [`io::ErrorKind::InvalidData`], and the connection is treated as lost (a peer
//! speaking garbage is a peer that failed).

use std::io::{self, Read};

use rpma_core::transport::{RemoteBuf, SendOp};
use rpma_core::{FlushType, WcStatus};

/// What the first frame of a connection starts with.
pub(crate) const MAGIC: &[u8; 8] = b"RPMAMOCK";
/// The protocol's version (a peer with another is refused).
pub(crate) const VERSION: u16 = 1;
/// The largest message a frame carries: 2 GiB, the mock's default `Capabilities::max_msg_size`.
pub(crate) const MAX_MESSAGE: u64 = 1 << 31;
/// The largest frame accepted: a request or answer carrying a message of up to
/// [`MAX_MESSAGE`] plus its header.
pub(crate) const MAX_FRAME: u32 = MAX_MESSAGE as u32 + 64;
/// The largest frame of any other kind (hello, accept, reject, disconnect, bye): private data
/// of at most `u16::MAX` bytes plus its fields. Checked on the tag before anything is reserved,
/// so a peer cannot make this side set aside a request's worth of memory for a hello.
const MAX_CONTROL_FRAME: u32 = (1 << 16) + 64;

const HELLO: u8 = 1;
const ACCEPT: u8 = 2;
const REJECT: u8 = 3;
const REQ: u8 = 4;
const ACK: u8 = 5;
const DREQ: u8 = 6;
const DREP: u8 = 7;
const BYE: u8 = 8;

/// The native operations a side's device has: bit 0 flush, bit 1 atomic write.
pub(crate) type Native = u8;
pub(crate) const NATIVE_FLUSH: Native = 1;
pub(crate) const NATIVE_ATOMIC_WRITE: Native = 2;

/// A work request as the initiator sends it to the responder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Req {
    /// The initiator's send-queue sequence number (answered in order).
    pub(crate) seq: u64,
    pub(crate) op: SendOp,
    /// How the initiator's device executes flush and atomic write ([`Native`] bits).
    pub(crate) native: Native,
    /// The remote side (`None`: a send, or a zero-byte read or write).
    pub(crate) remote: Option<(u64, u32)>,
    /// Bytes the operation covers (read: to read; flush: to flush; write, send: `data.len()`).
    pub(crate) len: u64,
    /// The bytes of a write or send.
    pub(crate) data: Vec<u8>,
}

impl Req {
    /// The remote side as rpma-core describes it (the described length is not sent: the
    /// responder checks against its own registration).
    pub(crate) fn remote_buf(&self) -> Option<RemoteBuf> {
        self.remote.map(|(addr, rkey)| RemoteBuf { addr, rkey, described_len: self.len })
    }

    /// Whether the request consumes a receive at the responder.
    pub(crate) const fn consumes_receive(&self) -> bool {
        matches!(self.op, SendOp::Send | SendOp::SendImm(_) | SendOp::WriteImm(_))
    }
}

/// A frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// The connecting side's request: its native operations, private data.
    Hello { native: Native, pdata: Vec<u8> },
    /// The listening side accepted: its native operations, private data.
    Accept { native: Native, pdata: Vec<u8> },
    /// The listening side rejected the request.
    Reject,
    /// A work request.
    Req(Req),
    /// The responder's answer to request `seq`: its status and, for a read, the bytes.
    Ack { seq: u64, status: WcStatus, data: Vec<u8> },
    /// A disconnect request (RDMA CM's DREQ).
    Dreq,
    /// The answer to a disconnect request (DREP).
    Drep,
    /// The sender destroys its end: nothing follows.
    Bye,
}

fn op_code(op: SendOp) -> (u8, u32) {
    match op {
        SendOp::Read => (1, 0),
        SendOp::Write => (2, 0),
        SendOp::WriteImm(i) => (3, i),
        SendOp::AtomicWrite(_) => (4, 0),
        SendOp::Flush(FlushType::Visibility) => (5, 0),
        SendOp::Flush(FlushType::Persistent) => (6, 0),
        SendOp::Send => (7, 0),
        SendOp::SendImm(i) => (8, i),
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("malformed frame from the peer process: {what}"))
}

/// Starts a frame: room for its length, then the tag.
fn start(tag: u8, body: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(5 + body);
    v.extend_from_slice(&[0; 4]);
    v.push(tag);
    v
}

/// Ends a frame: writes its length.
fn finish(mut v: Vec<u8>) -> Vec<u8> {
    let len = u32::try_from(v.len() - 4).unwrap_or(u32::MAX);
    v[..4].copy_from_slice(&len.to_le_bytes());
    v
}

impl Frame {
    /// The frame's bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        match self {
            Self::Hello { native, pdata } => {
                let mut v = start(HELLO, 13 + pdata.len());
                v.extend_from_slice(MAGIC);
                v.extend_from_slice(&VERSION.to_le_bytes());
                v.push(*native);
                put_bytes(&mut v, pdata);
                finish(v)
            }
            Self::Accept { native, pdata } => {
                let mut v = start(ACCEPT, 3 + pdata.len());
                v.push(*native);
                put_bytes(&mut v, pdata);
                finish(v)
            }
            Self::Req(r) => encode_req(r.seq, r.op, r.native, r.remote, r.len, |v| v.extend_from_slice(&r.data)),
            Self::Ack { seq, status, data } => {
                let mut v = start(ACK, 12 + data.len());
                v.extend_from_slice(&seq.to_le_bytes());
                v.extend_from_slice(&status.raw().to_le_bytes());
                v.extend_from_slice(data);
                finish(v)
            }
            Self::Reject => finish(start(REJECT, 0)),
            Self::Dreq => finish(start(DREQ, 0)),
            Self::Drep => finish(start(DREP, 0)),
            Self::Bye => finish(start(BYE, 0)),
        }
    }
}

fn put_bytes(v: &mut Vec<u8>, b: &[u8]) {
    let n = u16::try_from(b.len()).unwrap_or(u16::MAX);
    v.extend_from_slice(&n.to_le_bytes());
    v.extend_from_slice(&b[..usize::from(n)]);
}

/// A request frame; `payload` appends the bytes of a write or send (copied once, into the
/// frame), an atomic write's come from `op`.
pub(crate) fn encode_req(
    seq: u64,
    op: SendOp,
    native: Native,
    remote: Option<(u64, u32)>,
    len: u64,
    payload: impl FnOnce(&mut Vec<u8>),
) -> Vec<u8> {
    let (code, imm) = op_code(op);
    let carried = if matches!(op, SendOp::Write | SendOp::WriteImm(_) | SendOp::Send | SendOp::SendImm(_)) {
        usize::try_from(len).unwrap_or(0)
    } else {
        8
    };
    let mut v = start(REQ, 35 + carried);
    v.extend_from_slice(&seq.to_le_bytes());
    v.push(code);
    v.push(native);
    v.extend_from_slice(&imm.to_le_bytes());
    let (addr, rkey) = remote.unwrap_or((0, 0));
    v.push(u8::from(remote.is_some()));
    v.extend_from_slice(&addr.to_le_bytes());
    v.extend_from_slice(&rkey.to_le_bytes());
    v.extend_from_slice(&len.to_le_bytes());
    if let SendOp::AtomicWrite(bytes) = op {
        v.extend_from_slice(&bytes);
    } else {
        payload(&mut v);
    }
    finish(v)
}

/// A cursor over a frame's body that refuses to read past it.
struct Body<'a>(&'a [u8]);

impl Body<'_> {
    fn take(&mut self, n: usize) -> io::Result<&[u8]> {
        if self.0.len() < n {
            return Err(invalid("a field is cut short"));
        }
        let (h, t) = self.0.split_at(n);
        self.0 = t;
        Ok(h)
    }

    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> io::Result<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }

    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    fn bytes(&mut self) -> io::Result<Vec<u8>> {
        let n = self.u16()?;
        Ok(self.take(usize::from(n))?.to_vec())
    }

    fn rest(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.0).to_vec()
    }

    fn end(&self) -> io::Result<()> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(invalid("trailing bytes"))
        }
    }
}

fn decode_req(b: &mut Body<'_>) -> io::Result<Req> {
    let seq = b.u64()?;
    let code = b.u8()?;
    let native = b.u8()?;
    let imm = b.u32()?;
    let has_remote = b.u8()?;
    let addr = b.u64()?;
    let rkey = b.u32()?;
    let len = b.u64()?;
    let remote = match has_remote {
        0 => None,
        1 => Some((addr, rkey)),
        _ => return Err(invalid("bad remote flag")),
    };
    let data = b.rest();
    let op = match code {
        1 => SendOp::Read,
        2 => SendOp::Write,
        3 => SendOp::WriteImm(imm),
        4 => {
            let bytes: [u8; 8] =
                data.as_slice().try_into().map_err(|_| invalid("an atomic write of other than 8 bytes"))?;
            SendOp::AtomicWrite(bytes)
        }
        5 => SendOp::Flush(FlushType::Visibility),
        6 => SendOp::Flush(FlushType::Persistent),
        7 => SendOp::Send,
        8 => SendOp::SendImm(imm),
        _ => return Err(invalid("unknown operation")),
    };
    // What carries bytes carries exactly `len` of them; the rest carries none.
    let carried = match op {
        SendOp::Write | SendOp::WriteImm(_) | SendOp::Send | SendOp::SendImm(_) => len,
        SendOp::AtomicWrite(_) => 8,
        SendOp::Read | SendOp::Flush(_) => 0,
    };
    if data.len() as u64 != carried {
        return Err(invalid("the payload's length disagrees with the request"));
    }
    let one_sided = !matches!(op, SendOp::Send | SendOp::SendImm(_));
    if remote.is_none() && one_sided && (len != 0 || matches!(op, SendOp::AtomicWrite(_) | SendOp::Flush(_))) {
        return Err(invalid("a one-sided request without a remote side"));
    }
    let data = if matches!(op, SendOp::AtomicWrite(_)) { Vec::new() } else { data };
    Ok(Req { seq, op, native, remote, len, data })
}

/// Decodes one frame's body (after its length).
pub(crate) fn decode(body: &[u8]) -> io::Result<Frame> {
    let mut b = Body(body);
    let f = match b.u8()? {
        HELLO => {
            if b.take(8)? != MAGIC {
                return Err(invalid("not an rpma mock peer (bad magic)"));
            }
            let version = b.u16()?;
            if version != VERSION {
                return Err(invalid(&format!("protocol version {version}, expected {VERSION}")));
            }
            let native = b.u8()?;
            Frame::Hello { native, pdata: b.bytes()? }
        }
        ACCEPT => {
            let native = b.u8()?;
            Frame::Accept { native, pdata: b.bytes()? }
        }
        REJECT => Frame::Reject,
        REQ => Frame::Req(decode_req(&mut b)?),
        ACK => {
            let seq = b.u64()?;
            let status = WcStatus::from_raw(b.u32()?);
            Frame::Ack { seq, status, data: b.rest() }
        }
        DREQ => Frame::Dreq,
        DREP => Frame::Drep,
        BYE => Frame::Bye,
        _ => return Err(invalid("unknown frame")),
    };
    b.end()?;
    Ok(f)
}

/// Reads one frame: `Ok(None)` at a clean end of the stream (between frames).
///
/// # Errors
/// The stream's error, or [`io::ErrorKind::InvalidData`] for a frame above [`MAX_FRAME`], cut
/// short or malformed. A frame's buffer is reserved fallibly, so a lying length cannot abort
/// the process.
pub(crate) fn read_frame(r: &mut impl Read) -> io::Result<Option<Frame>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(invalid("the stream ends inside a frame's length")),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_le_bytes(len);
    if len == 0 || len > MAX_FRAME {
        return Err(invalid(&format!("a frame of {len} bytes")));
    }
    let mut tag = [0u8; 1];
    r.read_exact(&mut tag).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => invalid("the stream ends inside a frame"),
        _ => e,
    })?;
    if !matches!(tag[0], REQ | ACK) && len > MAX_CONTROL_FRAME {
        return Err(invalid(&format!("a frame of {len} bytes with tag {}", tag[0])));
    }
    let mut body = Vec::new();
    body.try_reserve_exact(len as usize).map_err(|_| invalid(&format!("no memory for a frame of {len} bytes")))?;
    body.push(tag[0]);
    r.take(u64::from(len - 1)).read_to_end(&mut body)?;
    if body.len() != len as usize {
        return Err(invalid("the stream ends inside a frame"));
    }
    decode(&body).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(f: &Frame) {
        let bytes = f.encode();
        let back = read_frame(&mut bytes.as_slice()).expect("decodes").expect("a frame");
        assert_eq!(&back, f);
    }

    #[test]
    fn every_frame_round_trips() {
        round_trip(&Frame::Hello { native: 3, pdata: b"hello".to_vec() });
        round_trip(&Frame::Accept { native: 0, pdata: Vec::new() });
        round_trip(&Frame::Reject);
        round_trip(&Frame::Dreq);
        round_trip(&Frame::Drep);
        round_trip(&Frame::Bye);
        round_trip(&Frame::Ack { seq: 7, status: WcStatus::RemAccessErr, data: vec![1, 2, 3] });
        for op in [SendOp::Read, SendOp::Flush(FlushType::Persistent), SendOp::Flush(FlushType::Visibility)] {
            round_trip(&Frame::Req(Req { seq: 1, op, native: 1, remote: Some((0x1000, 9)), len: 64, data: vec![] }));
        }
        round_trip(&Frame::Req(Req {
            seq: 2,
            op: SendOp::Write,
            native: 0,
            remote: Some((0x2000, 5)),
            len: 3,
            data: vec![7, 8, 9],
        }));
        round_trip(&Frame::Req(Req {
            seq: 3,
            op: SendOp::AtomicWrite(*b"12345678"),
            native: 2,
            remote: Some((0x2008, 5)),
            len: 8,
            data: vec![],
        }));
        round_trip(&Frame::Req(Req {
            seq: 4,
            op: SendOp::SendImm(42),
            native: 0,
            remote: None,
            len: 2,
            data: vec![1, 2],
        }));
    }

    #[test]
    fn garbage_is_refused() {
        let bad: [&[u8]; 7] = [
            &[0, 0, 0, 0],
            &[1, 0, 0, 0, 99],
            &[3, 0, 0, 0, 6, 0, 0],
            &[0xff, 0xff, 0xff, 0xff],
            &[9, 0, 0, 0, HELLO, b'N', b'O', b'P', b'E', 0, 0, 0, 0],
            &[2, 0, 0, 0, BYE, 0],
            &[5, 0, 0],
        ];
        for b in bad {
            let e = read_frame(&mut &b[..]).expect_err("refused");
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{b:?}: {e}");
        }
        // A write whose payload is shorter than its length.
        let mut w = encode_req(1, SendOp::Write, 0, Some((0, 1)), 8, |v| v.extend_from_slice(&[1, 2, 3]));
        assert!(read_frame(&mut w.as_slice()).is_err());
        // An atomic write without its 8 bytes.
        w = finish({
            let mut v = start(REQ, 0);
            v.extend_from_slice(&encode_req(1, SendOp::Read, 0, Some((0, 1)), 8, |_| {})[5..]);
            v[13] = 4;
            v
        });
        assert!(read_frame(&mut w.as_slice()).is_err());
    }

    #[test]
    fn a_control_frame_above_its_limit_is_refused_before_anything_is_reserved() {
        // A hello claiming a request's size, with no body behind it: refused on its tag, not
        // read (nor reserved) for the bytes it claims.
        let mut w = ((1u32 << 30) + 1).to_le_bytes().to_vec();
        w.push(HELLO);
        let e = read_frame(&mut w.as_slice()).expect_err("refused");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("with tag 1"), "{e}");
        // Requests and answers may be as large as a message (2 GiB) plus a header.
        let mut w = (MAX_FRAME + 1).to_le_bytes().to_vec();
        w.push(REQ);
        assert_eq!(read_frame(&mut w.as_slice()).expect_err("refused").kind(), io::ErrorKind::InvalidData);
        // A frame cut after its tag ends the stream inside a frame.
        let mut w = 10u32.to_le_bytes().to_vec();
        w.push(ACK);
        assert_eq!(read_frame(&mut w.as_slice()).expect_err("cut").kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn a_clean_end_is_not_an_error() {
        assert!(read_frame(&mut &[][..]).expect("ok").is_none());
    }

    mod properties {
        use proptest::prelude::*;

        use super::super::*;

        /// Any well-formed request: bytes exactly where the operation carries them, a remote
        /// side wherever a one-sided operation needs one.
        fn req() -> impl Strategy<Value = Req> {
            let op = prop_oneof![
                Just(SendOp::Read),
                Just(SendOp::Write),
                any::<u32>().prop_map(SendOp::WriteImm),
                any::<[u8; 8]>().prop_map(SendOp::AtomicWrite),
                Just(SendOp::Flush(FlushType::Visibility)),
                Just(SendOp::Flush(FlushType::Persistent)),
                Just(SendOp::Send),
                any::<u32>().prop_map(SendOp::SendImm),
            ];
            let remote = proptest::option::of(any::<(u64, u32)>());
            (any::<u64>(), op, any::<u8>(), remote, proptest::collection::vec(any::<u8>(), 0..64), any::<u64>())
                .prop_map(|(seq, op, native, mut remote, data, len)| {
                    let carries = matches!(op, SendOp::Write | SendOp::WriteImm(_) | SendOp::Send | SendOp::SendImm(_));
                    let (len, data) = match op {
                        _ if carries => (data.len() as u64, data),
                        SendOp::AtomicWrite(_) => (8, Vec::new()),
                        _ => (len, Vec::new()),
                    };
                    if !matches!(op, SendOp::Send | SendOp::SendImm(_)) && remote.is_none() {
                        remote = Some((0x1000, 7));
                    }
                    Req { seq, op, native, remote, len, data }
                })
        }

        fn frame() -> impl Strategy<Value = Frame> {
            let pdata = || proptest::collection::vec(any::<u8>(), 0..=255);
            prop_oneof![
                (any::<u8>(), pdata()).prop_map(|(native, pdata)| Frame::Hello { native, pdata }),
                (any::<u8>(), pdata()).prop_map(|(native, pdata)| Frame::Accept { native, pdata }),
                Just(Frame::Reject),
                req().prop_map(Frame::Req),
                (any::<u64>(), any::<u32>(), proptest::collection::vec(any::<u8>(), 0..64))
                    .prop_map(|(seq, status, data)| Frame::Ack { seq, status: WcStatus::from_raw(status), data }),
                Just(Frame::Dreq),
                Just(Frame::Drep),
                Just(Frame::Bye),
            ]
        }

        /// What a peer process may send: a valid frame's body, changed at a few places, cut
        /// short or extended.
        fn hostile_body() -> impl Strategy<Value = Vec<u8>> {
            let edits = proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4);
            (frame(), edits, any::<prop::sample::Index>(), proptest::collection::vec(any::<u8>(), 0..4), any::<bool>())
                .prop_map(|(f, edits, cut, tail, shorten)| {
                    let mut body = f.encode().split_off(4);
                    for (at, byte) in edits {
                        let i = at.index(body.len());
                        body[i] = byte;
                    }
                    if shorten {
                        body.truncate(cut.index(body.len() + 1));
                    } else {
                        body.extend_from_slice(&tail);
                    }
                    body
                })
        }

        proptest! {
            #[test]
            fn every_well_formed_frame_round_trips(f in frame()) {
                let bytes = f.encode();
                prop_assert_eq!(bytes.len() - 4, u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize);
                prop_assert_eq!(read_frame(&mut bytes.as_slice()).expect("decodes").expect("a frame"), f);
            }

            /// Whatever a peer sends is refused as malformed or decodes to a frame that encodes
            /// to what decodes to it again; decoding never panics.
            #[test]
            fn hostile_bytes_are_refused_or_decode_to_a_stable_frame(body in hostile_body()) {
                match decode(&body) {
                    Err(e) => prop_assert_eq!(e.kind(), io::ErrorKind::InvalidData),
                    Ok(f) => {
                        let again = f.encode();
                        prop_assert_eq!(decode(&again[4..]).expect("its own encoding decodes"), f);
                    }
                }
            }

            #[test]
            fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
                let r = read_frame(&mut bytes.as_slice());
                if let Err(e) = r {
                    prop_assert_eq!(e.kind(), io::ErrorKind::InvalidData);
                }
            }
        }
    }
}
