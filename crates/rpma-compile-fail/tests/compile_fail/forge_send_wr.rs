// A send work request cannot be built outside rpma-core: only its validation makes one.
use rpma::mock::MockFabric;
use rpma::transport::{Local, SendOp, SendWr};

fn forge<'a>() -> SendWr<'a, MockFabric> {
    SendWr { op: SendOp::Write, local: Local::None, remote: None, len: 1 << 20, signaled: true, wr_id: 0 }
}

fn main() {
    let _ = forge;
}
