//! [`AnyOf`]: a value on one of the backends compiled in ([`AnyTransport`]: the transport
//! itself), and [`WithTransport`]: code generic over the transport, run on it.

use std::fmt;

use super::Backend;
use crate::Transport;

/// A family of types, one for each transport: `F::On<T>` is the family's type on transport `T`
/// (for `Peer<T>`: `type On<T: Transport> = Peer<T>`). What an [`AnyOf`] holds.
pub trait PerTransport {
    /// The family's type on transport `T`.
    type On<T: Transport>;
}

/// The transports themselves: `Transports::On<T>` is `T`, and `AnyOf<Transports>` is
/// [`AnyTransport`].
#[derive(Debug)]
pub enum Transports {}

impl PerTransport for Transports {
    type On<T: Transport> = T;
}

/// A value of the family `F` on one of the backends compiled in: `F::On<MockFabric>` or
/// `F::On<Verbs>`, the variant saying which ([`AnyOf::backend`]).
///
/// Its variants follow the cargo features, so a `match` on it names the backends of this build
/// (another crate's `match` ends with a `_` arm for the backends of other builds); a value is made
/// by the code that chose the backend, and [`AnyOf::run`] on an [`AnyTransport`] compiles in every
/// build. The generic code below the match is monomorphized per transport: one `match` per call,
/// no boxing.
#[non_exhaustive]
pub enum AnyOf<F: PerTransport> {
    /// On the in-memory fabric.
    #[cfg(feature = "mock")]
    Mock(F::On<crate::mock::MockFabric>),
    /// On RDMA devices over libibverbs + librdmacm.
    #[cfg(feature = "verbs")]
    Verbs(F::On<crate::verbs::Verbs>),
    /// None: a build without a backend has no value of this type (the variant only uses `F`).
    #[cfg(not(any(feature = "mock", feature = "verbs")))]
    #[doc(hidden)]
    Never(std::convert::Infallible, std::marker::PhantomData<F>),
}

/// An opened transport of one of the backends compiled in ([`Backend::open`]).
pub type AnyTransport = AnyOf<Transports>;

impl<F: PerTransport> AnyOf<F> {
    /// The backend the value is on.
    #[must_use]
    pub const fn backend(&self) -> Backend {
        match *self {
            #[cfg(feature = "mock")]
            Self::Mock(_) => Backend::Mock,
            #[cfg(feature = "verbs")]
            Self::Verbs(_) => Backend::Verbs,
            #[cfg(not(any(feature = "mock", feature = "verbs")))]
            Self::Never(never, _) => match never {},
        }
    }
}

/// The backend, not the value (`F::On<T>` need not be `Debug`).
impl<F: PerTransport> fmt::Debug for AnyOf<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnyOf").field("backend", &self.backend()).finish_non_exhaustive()
    }
}

impl Clone for AnyTransport {
    fn clone(&self) -> Self {
        match *self {
            #[cfg(feature = "mock")]
            Self::Mock(ref t) => Self::Mock(t.clone()),
            #[cfg(feature = "verbs")]
            Self::Verbs(t) => Self::Verbs(t),
            #[cfg(not(any(feature = "mock", feature = "verbs")))]
            Self::Never(never, _) => match never {},
        }
    }
}

/// Code generic over the transport, run by [`Backend::run`] (or [`AnyOf::run`]) on the
/// transport chosen at run time.
pub trait WithTransport {
    /// What the code returns (a `Result` if it can fail).
    type Output;
    /// Runs the code on `transport`.
    fn run<T: Transport>(self, transport: T) -> Self::Output;
}

impl AnyTransport {
    /// Runs `work` on the transport, statically dispatched.
    // Without a backend there is no transport to run on (and this type has no value).
    #[cfg_attr(not(any(feature = "mock", feature = "verbs")), allow(unused_variables))]
    pub fn run<W: WithTransport>(self, work: W) -> W::Output {
        match self {
            #[cfg(feature = "mock")]
            Self::Mock(t) => work.run(t),
            #[cfg(feature = "verbs")]
            Self::Verbs(t) => work.run(t),
            #[cfg(not(any(feature = "mock", feature = "verbs")))]
            Self::Never(never, _) => match never {},
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A family of this crate's generic types.
    #[cfg(feature = "mock")]
    struct Peers;

    #[cfg(feature = "mock")]
    impl PerTransport for Peers {
        type On<T: Transport> = crate::Peer<T>;
    }

    #[test]
    fn every_variant_is_its_backend() {
        #[cfg(feature = "mock")]
        {
            let fabric = crate::mock::MockFabric::new();
            let t = AnyTransport::Mock(fabric.clone());
            assert_eq!(t.backend(), Backend::Mock);
            assert!(matches!(t.clone(), AnyTransport::Mock(_)));
            assert_eq!(format!("{t:?}"), "AnyOf { backend: Mock, .. }");
            let dev = crate::Device::lookup(&fabric, "127.0.0.1", crate::ContextType::Local).unwrap();
            let peer: AnyOf<Peers> = AnyOf::Mock(crate::Peer::new(&dev).unwrap());
            assert_eq!(peer.backend(), Backend::Mock);
        }
        #[cfg(feature = "verbs")]
        assert_eq!(AnyTransport::Verbs(crate::verbs::Verbs::new()).backend(), Backend::Verbs);
        // Every backend compiled in opens as its own variant.
        for b in Backend::compiled_in() {
            if let Ok(t) = b.open() {
                assert_eq!(t.backend(), b);
            }
        }
    }
}
