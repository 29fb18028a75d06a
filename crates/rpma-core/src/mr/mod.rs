//! Memory regions: the local one this side registered ([`MrLocal`]) and the remote one a peer
//! described ([`MrRemote`]).

mod local;
pub(crate) mod remote;

pub use local::MrLocal;
pub use remote::MrRemote;
