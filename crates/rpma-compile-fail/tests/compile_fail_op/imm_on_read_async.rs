// The async API posts the same operation value: an immediate value on a read does not compile
// there either, and neither does a receive posted unsignaled (it has no completion flags).
use rpma::mock::{MockFabric, MrLocal};
use rpma::tokio::AsyncConn;
use rpma::{op, MrRemote};

async fn read_with_imm(conn: &AsyncConn<MockFabric>, dst: &MrLocal, remote: &MrRemote) -> rpma::Result<()> {
    conn.post(op::read(dst.slice(0..8), remote.at(0)).imm(1)).await.map(drop)
}

async fn recv_unsignaled(conn: &AsyncConn<MockFabric>, dst: &MrLocal) -> rpma::Result<()> {
    conn.post_unsignaled(op::recv(dst.slice(0..8))).await
}

fn main() {
    let _ = (read_with_imm, recv_unsignaled);
}
