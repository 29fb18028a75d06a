// A receive has no completion flags (it always completes): `.flags(..)` on one does not
// compile, whether it is made from the connection or as an operation value, and neither does
// pushing it into a batch of the send queue.
use rpma::mock::{Conn, MrLocal};
use rpma::{op, CompletionFlags};

fn builder(conn: &Conn, dst: &MrLocal) -> rpma::Result<()> {
    conn.recv(dst.slice(0..8)).flags(CompletionFlags::ON_ERROR).post()
}

fn value(conn: &Conn, dst: &MrLocal) -> rpma::Result<()> {
    conn.post(op::recv(dst.slice(0..8)).flags(CompletionFlags::ON_ERROR))
}

fn batch(conn: &Conn, dst: &MrLocal) -> rpma::Result<()> {
    conn.batch().push_op(op::recv(dst.slice(0..8))).map(drop)
}

fn main() {
    let _ = (builder, value, batch);
}
