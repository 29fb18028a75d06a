//! The backend an example runs on, and the address it listens and connects on (the async
//! examples').

use rpma::any::Backend;

/// `RPMA_BACKEND` (`mock`, `verbs`) if set, else verbs where the environment names a test
/// device (`RPMA_TEST_DEVICE`, as the Soft-RoCE VM does), else the mock; with `127.0.0.1` on the
/// mock and `RPMA_TEST_ADDR` on a device.
///
/// # Errors
/// The message of a bad `RPMA_BACKEND` (not the debug form `main` would print), or a device
/// backend without `RPMA_TEST_ADDR`.
pub fn from_env() -> Result<(Backend, String), String> {
    let device = std::env::var("RPMA_TEST_DEVICE").ok().filter(|d| !d.is_empty());
    let backend = Backend::from_env_or(if device.is_some() { Backend::Verbs } else { Backend::default() })
        .map_err(|e| e.to_string())?;
    let addr = if backend == Backend::Mock {
        "127.0.0.1".to_owned()
    } else {
        std::env::var("RPMA_TEST_ADDR")
            .map_err(|_| format!("the {backend} backend needs RPMA_TEST_ADDR (a device's address)"))?
    };
    Ok((backend, addr))
}
