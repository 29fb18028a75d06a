//! What a scenario's client was told is durable at the server, recorded as it goes, so that a
//! power cut at any point can be checked against it (`rpma demo --power-cut`,
//! docs/persistence.md).

use std::sync::{Arc, Mutex, PoisonError};

/// One thing the client was told is durable in the server's region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Promise {
    /// These bytes at this offset of the region.
    Bytes {
        /// The offset in the server's region.
        offset: usize,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// The native-endian `u64` at this offset is at least `value` (a log's `used` counter, which
    /// later appends may have moved on).
    AtLeast {
        /// The offset in the server's region.
        offset: usize,
        /// The smallest value it may hold.
        value: u64,
    },
}

impl Promise {
    /// Whether `region` (the server's region after a power cut) keeps the promise; `Err` says
    /// how it breaks it.
    ///
    /// # Errors
    /// A description of the broken promise.
    pub fn check(&self, region: &[u8]) -> Result<(), String> {
        match self {
            Self::Bytes { offset, bytes } => {
                let Some(got) = region.get(*offset..offset + bytes.len()) else {
                    return Err(format!(
                        "{} bytes at offset {offset} were acknowledged durable, the region has {} bytes",
                        bytes.len(),
                        region.len()
                    ));
                };
                let differ = got.iter().zip(bytes).filter(|(a, b)| a != b).count();
                match got.iter().zip(bytes).position(|(a, b)| a != b) {
                    None => Ok(()),
                    Some(i) => Err(format!(
                        "{} bytes at offset {offset} were acknowledged durable; the region differs in {differ} of \
                         them, first at offset {}: {:#04x} where {:#04x} was promised",
                        bytes.len(),
                        offset + i,
                        got[i],
                        bytes[i]
                    )),
                }
            }
            Self::AtLeast { offset, value } => {
                let got = region.get(*offset..offset + 8).and_then(|b| b.try_into().ok()).map(u64::from_ne_bytes);
                match got {
                    Some(v) if v >= *value => Ok(()),
                    _ => Err(format!(
                        "the counter at offset {offset} was acknowledged durable at {value}, the region holds {got:?}"
                    )),
                }
            }
        }
    }
}

/// The promises of one run, shared between the client's thread and whoever checks them.
#[derive(Clone, Debug, Default)]
pub struct Promises(Arc<Mutex<Vec<Promise>>>);

impl Promises {
    /// Records `p`.
    pub fn push(&self, p: Promise) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push(p);
    }

    /// The promises recorded so far.
    #[must_use]
    pub fn take(&self) -> Vec<Promise> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promises_hold_or_say_why_not() {
        let region = [b"hello".as_slice(), &[0; 3], &7u64.to_ne_bytes()].concat();
        assert!(Promise::Bytes { offset: 0, bytes: b"hello".to_vec() }.check(&region).is_ok());
        let e = Promise::Bytes { offset: 1, bytes: b"hello".to_vec() }.check(&region).unwrap_err();
        assert!(e.contains("offset 1"), "{e}");
        assert!(Promise::AtLeast { offset: 8, value: 7 }.check(&region).is_ok());
        assert!(Promise::AtLeast { offset: 8, value: 8 }.check(&region).is_err());
        assert!(Promise::AtLeast { offset: 12, value: 0 }.check(&region).is_err(), "past the end");
    }
}
