// A connection's queue pair cannot be ended through `Conn::backend()`: `destroy` takes the
// queue pair by value, and the connection only lends it.
use rpma::transport::CmBackend;

fn end_it(conn: &rpma::mock::Conn) {
    let _ = conn.backend().destroy();
}

fn main() {
    let _ = end_it;
}
