// A receive work request cannot be built outside rpma-core, not even with its private mark
// named: the field is private to rpma-core, and so is the mark's constructor.
use rpma::mock::MockFabric;
use rpma::transport::{ByCore, Local, RecvWr};

fn forge<'a>(mark: ByCore) -> RecvWr<'a, MockFabric> {
    RecvWr { local: Local::None, wr_id: 0, _by_core: mark }
}

fn main() {
    let _ = forge;
}
