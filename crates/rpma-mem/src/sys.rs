//! Facts about the system: page size, huge page size, round-ups. No unsafe code here.

use std::io;
use std::sync::OnceLock;

/// The size of a page (`sysconf(_SC_PAGESIZE)`), 4096 if sysconf cannot tell.
pub fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        match nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE) {
            Ok(Some(n)) if n > 0 => usize::try_from(n).ok().filter(|n| n.is_power_of_two()),
            _ => None,
        }
        .unwrap_or(4096)
    })
}

/// The default huge page size, from the `Hugepagesize:` line of `/proc/meminfo`.
pub(crate) fn huge_page_size() -> io::Result<usize> {
    let meminfo = std::fs::read_to_string("/proc/meminfo")?;
    parse_huge_page_size(&meminfo).ok_or_else(|| {
        io::Error::new(io::ErrorKind::Unsupported, "no Hugepagesize in /proc/meminfo: the kernel has no huge pages")
    })
}

/// The `Hugepagesize:` of a `/proc/meminfo` text, in bytes (it is given in kB).
fn parse_huge_page_size(meminfo: &str) -> Option<usize> {
    let line = meminfo.lines().find_map(|l| l.strip_prefix("Hugepagesize:"))?;
    let mut words = line.split_whitespace();
    let n: usize = words.next()?.parse().ok()?;
    let unit = match words.next() {
        Some("kB") => 1024,
        None => 1,
        Some(_) => return None,
    };
    n.checked_mul(unit).filter(|s| s.is_power_of_two())
}

/// `n` rounded up to a multiple of `align` (a power of two), `None` on overflow.
#[inline]
pub(crate) fn round_up(n: usize, align: usize) -> Option<usize> {
    debug_assert!(align.is_power_of_two());
    Some(n.checked_add(align - 1)? & !(align - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_size_is_a_power_of_two() {
        assert!(page_size().is_power_of_two() && page_size() >= 4096);
    }

    #[test]
    fn huge_page_size_parses_meminfo() {
        let text =
            "MemTotal:       24684084 kB\nHugePages_Total:       0\nHugepagesize:       2048 kB\nHugetlb: 0 kB\n";
        assert_eq!(parse_huge_page_size(text), Some(2 << 20));
        assert_eq!(parse_huge_page_size("Hugepagesize: 1048576 kB\n"), Some(1 << 30));
        assert_eq!(parse_huge_page_size("MemTotal: 1 kB\n"), None);
        assert_eq!(parse_huge_page_size("Hugepagesize: x kB\n"), None);
        assert_eq!(parse_huge_page_size("Hugepagesize: 3 kB\n"), None);
    }

    #[test]
    fn round_up_rounds_and_detects_overflow() {
        assert_eq!(round_up(0, 4096), Some(0));
        assert_eq!(round_up(1, 4096), Some(4096));
        assert_eq!(round_up(4096, 4096), Some(4096));
        assert_eq!(round_up(usize::MAX, 2), None);
    }
}
