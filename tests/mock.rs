//! The conformance suite on the in-memory mock fabric.
#![allow(non_snake_case, missing_docs)]

mod conformance;

use std::sync::atomic::{AtomicU32, Ordering};

use conformance::Backend;
use rpma::mock::MockFabric;
use rpma::Capabilities;

struct Mock {
    next_port: AtomicU32,
    /// `RPMA_TEST_MOCK_WIRE=1`: every connection goes through the cross-process mode's socket
    /// (a rendezvous directory of this run), as between two processes.
    wire: Option<tempfile::TempDir>,
}

impl Backend for Mock {
    type T = MockFabric;
    fn transport(&self) -> MockFabric {
        match &self.wire {
            Some(dir) => MockFabric::builder()
                .rendezvous(dir.path().join("rv"))
                .always_through_rendezvous(true)
                .try_build()
                .expect("a cross-process fabric"),
            None => MockFabric::new(),
        }
    }
    fn addr(&self) -> String {
        "127.0.0.1".to_owned()
    }
    fn port(&self) -> String {
        self.next_port.fetch_add(1, Ordering::Relaxed).to_string()
    }
    fn caps(&self) -> Capabilities {
        MockFabric::new().devices()[0].capabilities().clone()
    }
}

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let wire = match std::env::var("RPMA_TEST_MOCK_WIRE").as_deref() {
        Ok("1") => Some(tempfile::tempdir().expect("a temporary directory")),
        Ok("0") | Err(std::env::VarError::NotPresent) => None,
        Ok(v) => panic!("RPMA_TEST_MOCK_WIRE={v:?}: expected 0 or 1"),
        Err(e) => panic!("RPMA_TEST_MOCK_WIRE: {e}"),
    };
    let backend = std::sync::Arc::new(Mock { next_port: AtomicU32::new(7204), wire });
    let trials = conformance::all::<Mock>()
        .into_iter()
        .map(|(name, f)| {
            let b = std::sync::Arc::clone(&backend);
            libtest_mimic::Trial::test(name, move || {
                f(&b);
                Ok(())
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
