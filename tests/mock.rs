//! The conformance suite on the in-memory mock fabric.
#![allow(non_snake_case, missing_docs)]

mod conformance;

use std::sync::atomic::{AtomicU32, Ordering};

use conformance::Backend;
use rpma::mock::MockFabric;
use rpma::Capabilities;

struct Mock {
    next_port: AtomicU32,
}

impl Backend for Mock {
    type T = MockFabric;
    fn transport(&self) -> MockFabric {
        MockFabric::new()
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
    let backend = std::sync::Arc::new(Mock { next_port: AtomicU32::new(7204) });
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
