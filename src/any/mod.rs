//! The backend chosen at run time: from a name (`"mock"`, `"verbs"`) or the environment
//! ([`BACKEND_ENV`], `RPMA_BACKEND`), among the backends compiled in, dispatched once to code
//! generic over the [`Transport`](crate::Transport).
//!
//! The generic API (`rpma::Conn<T>`, ... with `T: rpma::Transport`) stays the fast path: the
//! choice is made once, by a `match` on [`Backend`], and below it everything is monomorphized
//! for the chosen transport (no boxing, no dynamic dispatch per operation). Write the code once
//! as a [`WithTransport`] and hand it to [`Backend::run`]; or [`Backend::open`] the transport
//! as an [`AnyTransport`] and match it where the objects must outlive one call (a C ABI whose
//! handles keep their backend's objects, say): [`AnyOf`] holds any such object, `AnyOf<F>` a
//! value of the family `F` ([`PerTransport`], e.g. `Peer<T>` for every `T`) on the backend it was
//! made on.
//!
//! [`Backend`] is the one enumeration of the backends (what the command line's `--backend`, the
//! C library's `RPMA_BACKEND` and the examples name); [`AnyOf`] the one enumeration of values of
//! them, its variants those of [`Backend`] compiled in ([`AnyOf::backend`]).
//!
//! A name of a backend that was not compiled in parses (it names one), and opening it fails
//! with [`Error::NotCompiledIn`] naming the cargo feature that builds it: features stay
//! additive, and a build without one says so instead of calling the name unknown.
//!
//! ```
//! use rpma::any::{Backend, WithTransport};
//! use rpma::{ContextType, Device, Transport};
//!
//! /// Code for any transport: the name of the device that owns an address.
//! struct DeviceName<'a>(&'a str);
//!
//! impl WithTransport for DeviceName<'_> {
//!     type Output = rpma::Result<String>;
//!     fn run<T: Transport>(self, transport: T) -> rpma::Result<String> {
//!         Ok(Device::lookup(&transport, self.0, ContextType::Local)?.name())
//!     }
//! }
//!
//! let backend: Backend = "mock".parse()?;
//! assert_eq!(backend.to_string(), "mock");
//! // The outer `?`: the backend could not be opened; the inner one: what the code returns.
//! assert_eq!(backend.run(DeviceName("127.0.0.1"))??, "mock0");
//!
//! // Unknown names are refused with the list of known ones.
//! let err = "rxe".parse::<Backend>().unwrap_err();
//! assert_eq!(err.to_string(), "unknown backend `rxe` (known: mock, verbs)");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Reading the environment (`RPMA_BACKEND=verbs`, unset: [`Backend::default`]):
//!
//! ```
//! # fn f() -> Result<(), Box<dyn std::error::Error>> {
//! # struct Work;
//! # impl rpma::any::WithTransport for Work {
//! #     type Output = ();
//! #     fn run<T: rpma::Transport>(self, _: T) {}
//! # }
//! let backend = rpma::any::Backend::from_env()?;
//! eprintln!("running on {backend}");
//! backend.run(Work)?;
//! # Ok(()) }
//! ```

mod any_of;
mod backend;
mod error;

pub use any_of::{AnyOf, AnyTransport, PerTransport, Transports, WithTransport};
pub use backend::{Backend, BACKEND_ENV};
pub use error::Error;
