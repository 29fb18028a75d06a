//! Raw memory of rpma-rs (being written).
