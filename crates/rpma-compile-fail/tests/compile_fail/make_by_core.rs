// The mark of a validated work request has no constructor outside rpma-core.
use rpma::transport::ByCore;

fn main() {
    let _ = ByCore(());
}
