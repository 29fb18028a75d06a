//! The operations `rpma bench` measures, and what each one is.

/// An operation the benchmark measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    /// RDMA Read from the server's memory (`rpma_read`).
    Read,
    /// RDMA Write to the server's memory (`rpma_write`).
    Write,
    /// A write followed by a persistent flush of the same range (`rpma_write` + `rpma_flush`).
    WriteFlush,
    /// A persistent flush alone (`rpma_flush`).
    Flush,
    /// An 8-byte atomic write (`rpma_atomic_write`).
    AtomicWrite,
    /// Send/receive ping-pong (`rpma_send` + `rpma_recv`).
    Send,
    /// Send-with-immediate ping-pong (`rpma_send_with_imm`).
    SendImm,
    /// Write-with-immediate ping-pong (`rpma_write_with_imm`, echoed with a send).
    WriteImm,
    /// RDMA Write ping-pong as perftest's `ib_write_lat`: client and server alternately write
    /// the message into each other's memory and each polls its own memory for its arrival.
    WritePingpong,
    /// Connection setup: one connection per operation, connected, established, disconnected and
    /// closed on both sides, then deleted (`rpma_conn_req_new`, `rpma_conn_req_connect`,
    /// `rpma_conn_disconnect`, `rpma_conn_delete`; the server accepts with
    /// `rpma_ep_next_conn_req` and `rpma_conn_req_connect`). Latency is the whole cycle as the
    /// client sees it; the size does not apply.
    Connect,
}

impl Op {
    /// The name used on the command line and in reports.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::WriteFlush => "write-flush",
            Self::Flush => "flush",
            Self::AtomicWrite => "atomic-write",
            Self::Send => "send",
            Self::SendImm => "send-imm",
            Self::WriteImm => "write-imm",
            Self::WritePingpong => "write-pingpong",
            Self::Connect => "connect",
        }
    }

    /// Whether the operation is a message ping-pong (the server takes part).
    #[must_use]
    pub const fn is_ping_pong(self) -> bool {
        matches!(self, Self::Send | Self::SendImm | Self::WriteImm)
    }

    /// Whether the latency reported is half a round trip (the ping-pongs), not the time to a
    /// completion.
    #[must_use]
    pub const fn is_half_round_trip(self) -> bool {
        self.is_ping_pong() || matches!(self, Self::WritePingpong)
    }

    /// Whether the operation posts a flush (`write-flush`, `flush`).
    #[must_use]
    pub const fn flushes(self) -> bool {
        matches!(self, Self::WriteFlush | Self::Flush)
    }

    /// Whether the operation is an atomic write.
    #[must_use]
    pub const fn atomic_writes(self) -> bool {
        matches!(self, Self::AtomicWrite)
    }

    /// Whether the operation is one-sided with one completion per operation, so it may be
    /// signaled selectively (`--cq-mod`).
    #[must_use]
    pub const fn is_selectively_signaled(self) -> bool {
        matches!(self, Self::Read | Self::Write | Self::WriteFlush | Self::Flush | Self::AtomicWrite)
    }
}

/// The operations `--async` measures (one-sided, one completion each).
pub const ASYNC_OPS: [Op; 5] = [Op::Read, Op::Write, Op::WriteFlush, Op::Flush, Op::AtomicWrite];
