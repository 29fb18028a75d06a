//! How persistent flushes go on a device with native flush (`rpma bench --persistent-flush`).

/// How a persistent flush goes on a device with native flush (`--persistent-flush`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlushRule {
    /// Native `IBV_FLUSH_PERSISTENT` (rpma-verbs' default).
    Native,
    /// The RDMA Read (APM).
    Read,
}

impl FlushRule {
    /// Makes the rule rpma-verbs' (process-wide) when `T` is the verbs transport; any other
    /// transport has no such rule (nothing to set).
    pub fn apply<T: rpma::Transport>(self) {
        #[cfg(feature = "verbs")]
        if std::any::TypeId::of::<T>() == std::any::TypeId::of::<rpma::verbs::Verbs>() {
            rpma::verbs::set_persistent_flush(match self {
                Self::Native => rpma::verbs::PersistentFlush::Native,
                Self::Read => rpma::verbs::PersistentFlush::Read,
            });
        }
    }
}
