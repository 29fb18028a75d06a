// An immediate value goes with a write or a send only: on a read it does not compile, whether
// the read is made from the connection (the builder) or as an operation value.
use rpma::mock::{Conn, MrLocal};
use rpma::{op, MrRemote};

fn builder(conn: &Conn, dst: &MrLocal, remote: &MrRemote) -> rpma::Result<()> {
    conn.read(dst.slice(0..8), remote.at(0)).imm(1).post()
}

fn value(conn: &Conn, dst: &MrLocal, remote: &MrRemote) -> rpma::Result<()> {
    conn.post(op::read(dst.slice(0..8), remote.at(0)).imm(1))
}

fn main() {
    let _ = (builder, value);
}
