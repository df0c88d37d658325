//! The connect string: `host:port,host:port,...`, the gRPC addresses of the
//! replicas, as ZooKeeper clients take it (without ZooKeeper's chroot suffix).

use super::error::ClientError;
use std::fmt;

/// Most servers a connect string may name (an ensemble is a handful; this only
/// keeps a typo from allocating without bound).
pub const MAX_SERVERS: usize = 255;

/// One server address from a connect string.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServerAddr {
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl ServerAddr {
    /// The `http://` URI tonic connects to.
    pub fn uri(&self) -> String {
        format!("http://{self}")
    }
}

impl fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

fn invalid(input: &str, reason: impl Into<String>) -> ClientError {
    ClientError::InvalidConnectString { input: input.to_string(), reason: reason.into() }
}

fn parse_one(input: &str, entry: &str) -> Result<ServerAddr, ClientError> {
    let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| invalid(input, format!("{entry:?}: missing ']' after an IPv6 address")))?;
        let port =
            after.strip_prefix(':').ok_or_else(|| invalid(input, format!("{entry:?}: missing ':port' after ']'")))?;
        (host, port)
    } else {
        let (host, port) = entry
            .rsplit_once(':')
            .ok_or_else(|| invalid(input, format!("{entry:?}: missing ':port' (write host:port)")))?;
        if host.contains(':') {
            return Err(invalid(input, format!("{entry:?}: write IPv6 addresses as [address]:port")));
        }
        (host, port)
    };
    if host.is_empty() {
        return Err(invalid(input, format!("{entry:?}: empty host")));
    }
    if host.chars().any(|c| c.is_whitespace() || c == '/' || c == '@') {
        return Err(invalid(input, format!("{entry:?}: host {host:?} has a character not allowed in a host name")));
    }
    let port: u16 =
        port.parse().map_err(|_| invalid(input, format!("{entry:?}: port {port:?} is not a number 1..=65535")))?;
    if port == 0 {
        return Err(invalid(input, format!("{entry:?}: port 0 is not connectable")));
    }
    Ok(ServerAddr { host: host.to_string(), port })
}

/// Parses `host:port,host:port,...` into addresses, in order, without duplicates.
pub fn parse(input: &str) -> Result<Vec<ServerAddr>, ClientError> {
    if input.trim().is_empty() {
        return Err(invalid(input, "no server given"));
    }
    if let Some(at) = input.find('/') {
        return Err(invalid(input, format!("a chroot suffix ({:?}) is not supported", &input[at..])));
    }
    let mut out: Vec<ServerAddr> = Vec::new();
    for entry in input.split(',') {
        let entry = entry.trim();
        if entry.is_empty() {
            return Err(invalid(input, "empty entry between commas"));
        }
        let addr = parse_one(input, entry)?;
        if !out.contains(&addr) {
            if out.len() == MAX_SERVERS {
                return Err(invalid(input, format!("more than {MAX_SERVERS} servers")));
            }
            out.push(addr);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(host: &str, port: u16) -> ServerAddr {
        ServerAddr { host: host.into(), port }
    }

    #[test]
    fn parses_hosts_in_order_and_drops_duplicates() {
        let got = parse("127.0.0.1:3181, localhost:3182,127.0.0.1:3181,[::1]:3183").unwrap();
        assert_eq!(got, vec![addr("127.0.0.1", 3181), addr("localhost", 3182), addr("::1", 3183)]);
        assert_eq!(got[2].to_string(), "[::1]:3183");
        assert_eq!(got[0].uri(), "http://127.0.0.1:3181");
    }

    #[test]
    fn rejects_malformed_strings_with_a_reason() {
        for (input, needle) in [
            ("", "no server"),
            ("  ", "no server"),
            ("127.0.0.1", "missing ':port'"),
            ("a:1,,b:2", "empty entry"),
            ("a:0", "port 0"),
            ("a:99999", "not a number"),
            ("a:x", "not a number"),
            (":3181", "empty host"),
            ("::1:3181", "IPv6"),
            ("[::1]3181", "missing ':port'"),
            ("[::1:3181", "missing ']'"),
            ("a:1/chroot", "chroot"),
            ("a b:1", "not allowed"),
        ] {
            let err = parse(input).unwrap_err();
            assert!(err.to_string().contains(needle), "{input:?}: {err}");
            assert!(matches!(err, ClientError::InvalidConnectString { .. }));
        }
    }

    #[test]
    fn bounds_the_number_of_servers() {
        let many: Vec<String> = (1..=300).map(|p| format!("h:{p}")).collect();
        assert!(parse(&many.join(",")).unwrap_err().to_string().contains("more than"));
        let ok: Vec<String> = (1..=255).map(|p| format!("h:{p}")).collect();
        assert_eq!(parse(&ok.join(",")).unwrap().len(), 255);
    }
}
