//! Value parsers shared by the subcommands' arguments, with messages that say what is wrong:
//! a negative number is named as such (clap would take `-1` for an unknown flag, so the numeric
//! arguments allow leading hyphens and come here), and a port says which ports can be used.

use std::str::FromStr;

/// A whole number (`u64`, `u32`, `usize`...): not negative, no fraction.
///
/// # Errors
/// A message naming the value if it is negative or not a whole number in the type's range.
pub fn whole<T: FromStr>(s: &str) -> Result<T, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(format!("`{s}` is negative: expected a whole number, 0 or more"));
    }
    t.parse().map_err(|_| format!("`{s}` is not a whole number in range"))
}

/// A `u64`, see [`whole`].
///
/// # Errors
/// As [`whole`].
pub fn u64_arg(s: &str) -> Result<u64, String> {
    whole(s)
}

/// A `u32`, see [`whole`].
///
/// # Errors
/// As [`whole`].
pub fn u32_arg(s: &str) -> Result<u32, String> {
    whole(s)
}

/// A `usize`, see [`whole`].
///
/// # Errors
/// As [`whole`].
pub fn usize_arg(s: &str) -> Result<usize, String> {
    whole(s)
}

/// A number of seconds (a decimal number; its range is checked by the command).
///
/// # Errors
/// If it is not a number, or negative.
pub fn seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if v < 0.0 {
        return Err(format!("`{s}` is negative: expected a number of seconds greater than 0"));
    }
    Ok(v)
}

/// Why port 0 is refused.
pub const PORT_0: &str = "port 0 (a port the system picks) is not supported: the rpma API cannot tell which port \
                          the endpoint got, so it could not be printed for a client to connect to; give a port in \
                          1..=65535";

/// A TCP/RDMA CM port, 1 to 65535.
///
/// # Errors
/// A message naming the value if it is not a number in 1..=65535 (port 0 with [`PORT_0`]).
pub fn port(s: &str) -> Result<u16, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(format!("`{s}` is negative: a port is a number in 1..=65535"));
    }
    match t.parse::<u64>() {
        Ok(0) => Err(PORT_0.to_owned()),
        Ok(p) => u16::try_from(p).map_err(|_| format!("`{s}` is not a port: a port is a number in 1..=65535")),
        Err(_) => Err(format!("`{s}` is not a port: a port is a number in 1..=65535")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negatives_and_ports_are_named() {
        assert!(u64_arg("-1").unwrap_err().contains("negative"));
        assert_eq!(u64_arg("7"), Ok(7));
        assert!(u32_arg("4294967296").unwrap_err().contains("not a whole number"));
        assert!(seconds("-0.5").unwrap_err().contains("negative"));
        assert!(port("0").unwrap_err().contains("cannot tell which port"));
        assert!(port("65536").unwrap_err().contains("1..=65535"));
        assert!(port("-3").unwrap_err().contains("negative"));
        assert_eq!(port("7204"), Ok(7204));
    }
}
