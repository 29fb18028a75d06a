//! Conformance cases: cfg.

use super::harness::{Backend, Case};
use crate::cases;

pub fn cases<B: Backend>() -> Vec<Case<B>> {
    cases![]
}
