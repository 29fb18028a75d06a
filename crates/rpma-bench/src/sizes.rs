//! Message sizes on the command line: a size with a K, M or G suffix, a sweep `MIN..MAX`.

/// The largest message size accepted (1 GiB).
pub const MAX_SIZE: usize = 1 << 30;

/// A size sweep `MIN..MAX` (powers of two times MIN).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sweep {
    /// The first size.
    pub min: usize,
    /// The upper bound (included if reached by doubling).
    pub max: usize,
}

impl Sweep {
    /// The sizes of the sweep.
    #[must_use]
    pub fn sizes(self) -> Vec<usize> {
        std::iter::successors(Some(self.min), |s| s.checked_mul(2)).take_while(|s| *s <= self.max).collect()
    }
}

/// Parses a size: a number of bytes with an optional K, M or G suffix (powers of 1024; a
/// trailing `B` or `iB` is accepted).
///
/// # Errors
/// If it is not such a number, is 0 or exceeds [`MAX_SIZE`].
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let t = t.strip_suffix("iB").or_else(|| t.strip_suffix('B')).unwrap_or(t);
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1usize << 10),
        Some((i, 'm' | 'M')) => (&t[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    if num.trim_start().starts_with('-') {
        return Err(format!("`{s}` is negative: a message size is at least 1 byte"));
    }
    let n: usize = num.parse().map_err(|_| format!("`{s}` is not a size (a number with an optional K, M or G)"))?;
    let size = n.checked_mul(mult).ok_or_else(|| format!("size `{s}` is too large"))?;
    if size == 0 {
        return Err("a message size must be at least 1 byte".to_owned());
    }
    if size > MAX_SIZE {
        return Err(format!("size `{s}` exceeds the maximum of 1G"));
    }
    Ok(size)
}

/// Parses a sweep `MIN..MAX`.
///
/// # Errors
/// If either bound is not a size or MIN > MAX.
pub fn parse_sweep(s: &str) -> Result<Sweep, String> {
    let (a, b) = s.split_once("..").ok_or_else(|| format!("`{s}` is not a sweep MIN..MAX (e.g. 8..1M)"))?;
    let (min, max) = (parse_size(a)?, parse_size(b)?);
    if min > max {
        return Err(format!("sweep `{s}`: MIN is larger than MAX"));
    }
    Ok(Sweep { min, max })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert!(parse_size("0").unwrap_err().contains("at least 1 byte"));
        assert!(parse_size("2G").unwrap_err().contains("maximum"));
        assert!(parse_size("abc").unwrap_err().contains("not a size"));
        assert!(parse_size("").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999999999999K").is_err());
    }

    #[test]
    fn sweeps_double_up_to_max() {
        assert_eq!(parse_sweep("8..64").map(Sweep::sizes), Ok(vec![8, 16, 32, 64]));
        assert_eq!(parse_sweep("8..1M").map(|s| s.sizes().len()), Ok(18));
        assert_eq!(parse_sweep("3..20").map(Sweep::sizes), Ok(vec![3, 6, 12]));
        assert_eq!(parse_sweep("8..8").map(Sweep::sizes), Ok(vec![8]));
        assert!(parse_sweep("64..8").unwrap_err().contains("larger"));
        assert!(parse_sweep("8-64").unwrap_err().contains("MIN..MAX"));
    }
}
