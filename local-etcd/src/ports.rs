//! Loopback ports for etcd members.
//!
//! etcd takes its ports on the command line, so a port has to be chosen free, released,
//! and bound again by etcd. A port from `bind(0)` lies in the kernel's ephemeral range,
//! where any outgoing connection (the many a test suite makes) can take it in between;
//! a port below that range can only be taken by an explicit bind. So ports come from
//! below the ephemeral range, at a random point (other test processes pick too), and
//! never twice in one process.

use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::Mutex;

/// Lowest port handed out: above the well-known and most registered service ports.
const LOWEST: u16 = 20_000;
/// Candidates tried before giving up.
const CANDIDATES: usize = 500;

static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A loopback port that is free now, below the ephemeral range, not handed out before.
pub fn pick() -> std::io::Result<SocketAddr> {
    let (low, high) = range();
    let span = u64::from(high.saturating_sub(low)).max(1);
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    let given = given.get_or_insert_with(HashSet::new);
    for _ in 0..CANDIDATES {
        let offset = u16::try_from(random() % span).unwrap_or(0);
        let port = low.saturating_add(offset);
        if given.contains(&port) {
            continue;
        }
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        if TcpListener::bind(addr).is_ok() {
            given.insert(port);
            return Ok(addr);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("no free loopback port in {low}..{high} after {CANDIDATES} tries"),
    ))
}

/// `[low, high)`: from [`LOWEST`] up to the start of the ephemeral range. Where that
/// range starts too low to leave room, the ports above it are used instead.
fn range() -> (u16, u16) {
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| parse_range(&s));
    match ephemeral {
        Some((first, _)) if first >= LOWEST.saturating_add(1_000) => (LOWEST, first),
        Some((_, last)) if last <= u16::MAX - 1_000 => (last.saturating_add(1), u16::MAX),
        // Linux's default range, 32768-60999, where /proc cannot be read.
        _ => (LOWEST, 32_768),
    }
}

fn parse_range(s: &str) -> Option<(u16, u16)> {
    let mut it = s.split_whitespace().map(|w| w.parse::<u16>().ok());
    Some((it.next()??, it.next()??))
}

/// A random number from the standard library's per-process random hash keys.
fn random() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_file_is_read() {
        assert_eq!(parse_range("32768\t60999\n"), Some((32768, 60999)));
        assert_eq!(parse_range("32768"), None);
        assert_eq!(parse_range("x y"), None);
    }

    #[test]
    fn ports_are_below_the_ephemeral_range_and_never_repeat() {
        let (low, high) = range();
        let mut seen = HashSet::new();
        for _ in 0..50 {
            let addr = pick().unwrap();
            assert!(addr.ip().is_loopback());
            assert!(
                (low..high).contains(&addr.port()),
                "{addr} outside {low}..{high}"
            );
            assert!(seen.insert(addr.port()), "{addr} handed out twice");
        }
    }
}
