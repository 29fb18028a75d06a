//! What the examples of rpma-rs share (the examples themselves are the `.rs` files beside this
//! crate's `Cargo.toml`: `cargo run -p rpma-examples --example write_flush_send`).

pub mod backend;
