//! Addresses as an operator writes them: a host name or an IP, and a port.
//!
//! A name is never resolved when the config is read: a pod of a StatefulSet
//! comes back under the same name with a new IP, and a member that starts
//! before its peers' DNS records exist must still start. Names are resolved
//! where they are used: when a listener binds, and on every connect.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// A `host:port` pair; the host is a DNS name, an IPv4 address, or an IPv6
/// address (written in brackets, `[::1]:2181`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPort {
    host: String,
    port: u16,
}

impl HostPort {
    /// Where members reach `m`, a member of the replicated configuration
    /// (None when its line's peer address is not `host:port:port`).
    pub fn peer_of(m: &zabkeeper_core::members::Member) -> Option<HostPort> {
        HostPort::parse(&m.peer_host_port()?).ok()
    }

    /// Parses `value`; the message says what is wrong with it.
    pub fn parse(value: &str) -> Result<HostPort, String> {
        let (host, port) = match value.strip_prefix('[') {
            Some(rest) => {
                let (ip, after) = rest.split_once(']').ok_or("an IPv6 address needs its closing `]`")?;
                let port = after.strip_prefix(':').ok_or("expected `]:port` after an IPv6 address")?;
                ip.parse::<std::net::Ipv6Addr>().map_err(|e| format!("{ip:?} is not an IPv6 address ({e})"))?;
                (ip, port)
            }
            None => value.rsplit_once(':').ok_or("expected host:port")?,
        };
        let port: u16 = port.parse().map_err(|_| format!("{port:?} is not a port (0..=65535)"))?;
        if host.is_empty() {
            return Err("the host is empty".into());
        }
        if host.contains(':') && !value.starts_with('[') {
            return Err("write an IPv6 address in brackets, as [::1]:2181".into());
        }
        if host.parse::<IpAddr>().is_err() && !is_dns_name(host) {
            return Err(format!("{host:?} is neither an IP address nor a host name"));
        }
        Ok(HostPort { host: host.to_string(), port })
    }

    /// An address for a socket address (an IP literal).
    pub fn from_socket(addr: SocketAddr) -> HostPort {
        HostPort { host: addr.ip().to_string(), port: addr.port() }
    }

    /// The host: a name or an IP, without brackets.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The same host on another port.
    pub fn with_port(&self, port: u16) -> HostPort {
        HostPort { host: self.host.clone(), port }
    }

    /// The IP, when the host is written as one.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    /// Whether this names the local machine's loopback only: a loopback IP,
    /// or `localhost`.
    pub fn is_loopback(&self) -> bool {
        self.ip().map_or(self.host.eq_ignore_ascii_case("localhost"), |ip| ip.is_loopback())
    }

    /// Whether both name the same machine: the same host, or loopback both.
    pub fn same_machine(&self, other: &HostPort) -> bool {
        self.host.eq_ignore_ascii_case(&other.host) || (self.is_loopback() && other.is_loopback())
    }

    /// Resolves the host now (names through the system resolver).
    pub async fn resolve(&self) -> std::io::Result<Vec<SocketAddr>> {
        Ok(tokio::net::lookup_host((self.host.as_str(), self.port)).await?.collect())
    }
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// RFC 1123 host names: dot-separated labels of letters, digits and inner
/// hyphens (underscores too, which some resolvers and container runtimes use).
fn is_dns_name(host: &str) -> bool {
    host.len() <= 253
        && host.trim_end_matches('.').split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// The member id a StatefulSet's pod name implies: the number after the
/// last `-` of the first label, plus one (`zk-0` is member 1, as ZooKeeper's
/// own Kubernetes images number `myid`). None when the name has no ordinal.
pub fn id_from_hostname(hostname: &str) -> Option<u64> {
    let first = hostname.split('.').next()?;
    let (_, ordinal) = first.rsplit_once('-')?;
    if ordinal.is_empty() || !ordinal.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    ordinal.parse::<u64>().ok()?.checked_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_ips_and_bracketed_ipv6_parse_and_print_back() {
        for text in ["zk-0.zk-hs.default.svc.cluster.local:2888", "127.0.0.1:2181", "[::1]:2181", "localhost:0"] {
            assert_eq!(HostPort::parse(text).unwrap().to_string(), text);
        }
        let name = HostPort::parse("zk-1.zk-hs:3181").unwrap();
        assert_eq!((name.host(), name.port(), name.ip()), ("zk-1.zk-hs", 3181, None));
        assert!(HostPort::parse("localhost:1").unwrap().is_loopback());
        assert!(HostPort::parse("127.0.0.2:1").unwrap().is_loopback());
        assert!(!HostPort::parse("0.0.0.0:1").unwrap().is_loopback());
        assert!(!HostPort::parse("db.example:1").unwrap().is_loopback());
    }

    #[test]
    fn one_machine_is_one_host_name_or_loopback_twice() {
        let at = |text| HostPort::parse(text).unwrap();
        assert!(at("127.0.0.1:1").same_machine(&at("localhost:2")));
        assert!(at("127.0.0.2:1").same_machine(&at("[::1]:1")));
        assert!(at("ZK-0.zk-hs:1").same_machine(&at("zk-0.zk-hs:2")));
        assert!(!at("zk-0.zk-hs:1").same_machine(&at("zk-1.zk-hs:1")));
        assert!(!at("10.0.0.7:1").same_machine(&at("127.0.0.1:1")));
    }

    #[test]
    fn malformed_addresses_say_what_is_wrong() {
        let err = |text| HostPort::parse(text).unwrap_err();
        assert!(err("nowhere").contains("host:port"));
        assert!(err("host:99999").contains("not a port"));
        assert!(err(":2181").contains("empty"));
        assert!(err("::1:2181").contains("brackets"));
        assert!(err("[::1:2181").contains("closing"));
        assert!(err("bad host:1").contains("neither"));
        assert!(err("-lead.example:1").contains("neither"));
    }

    #[test]
    fn a_statefulset_ordinal_gives_the_member_id() {
        assert_eq!(id_from_hostname("zk-0"), Some(1));
        assert_eq!(id_from_hostname("zk-2.zk-hs.default.svc.cluster.local"), Some(3));
        assert_eq!(id_from_hostname("my-zab-keeper-11"), Some(12));
        assert_eq!(id_from_hostname("zk"), None);
        assert_eq!(id_from_hostname("zk-"), None);
        assert_eq!(id_from_hostname("zk-a1"), None);
        assert_eq!(id_from_hostname("host.zk-1"), None, "only the first label counts");
    }

    #[tokio::test]
    async fn names_resolve_when_asked() {
        let addrs = HostPort::parse("localhost:2181").unwrap().resolve().await.unwrap();
        assert!(addrs.iter().all(|a| a.ip().is_loopback() && a.port() == 2181), "{addrs:?}");
    }
}
