//! The decision: may this instance connect to this URL, and to which address.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use super::allowlist::{AllowEntry, Cidr, canonical};

/// An instance's outgoing-HTTP grant.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpPolicy {
    instance: String,
    allow: Vec<AllowEntry>,
    private: Vec<Cidr>,
    timeout: Duration,
}

/// Why a request was refused; the message names the grant that would allow it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Denial(pub String);

/// The kind of special-purpose network `ip` belongs to, if any. Such addresses
/// are refused unless a grant names them.
pub fn special_range(ip: IpAddr) -> Option<&'static str> {
    match canonical(ip) {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            if v4 == Ipv4Addr::new(169, 254, 169, 254) || v4 == Ipv4Addr::new(100, 100, 100, 200) {
                Some("a cloud metadata address")
            } else if v4.is_loopback() {
                Some("a loopback address")
            } else if v4.is_private() {
                Some("a private address")
            } else if v4.is_link_local() {
                Some("a link-local address")
            } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
                Some("a shared (carrier-grade NAT) address")
            } else if v4.is_unspecified() || o[0] == 0 {
                Some("an unspecified address")
            } else if v4.is_broadcast() || v4.is_multicast() || o[0] >= 240 {
                Some("a broadcast, multicast or reserved address")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            let seg = v6.segments();
            if seg[0] == 0xfd00 && seg[1] == 0x0ec2 {
                Some("a cloud metadata address")
            } else if v6.is_loopback() {
                Some("a loopback address")
            } else if v6.is_unspecified() {
                Some("an unspecified address")
            } else if (seg[0] & 0xfe00) == 0xfc00 {
                Some("a private (unique local) address")
            } else if (seg[0] & 0xffc0) == 0xfe80 {
                Some("a link-local address")
            } else if v6.is_multicast() {
                Some("a multicast address")
            } else {
                None
            }
        }
    }
}

impl HttpPolicy {
    /// A policy for `instance` (named in messages).
    pub fn new(instance: &str, allow: Vec<AllowEntry>, private: Vec<Cidr>, timeout: Duration) -> Self {
        HttpPolicy { instance: instance.to_string(), allow, private, timeout }
    }

    /// A policy that allows nothing.
    pub fn deny_all(instance: &str) -> Self {
        HttpPolicy::new(instance, Vec::new(), Vec::new(), Duration::from_secs(30))
    }

    /// The bound on each phase of a request.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether the allowlist admits `scheme://host:port` (before any resolution).
    pub fn check_target(&self, scheme: &str, host: &str, port: u16) -> Result<(), Denial> {
        if self.allow.iter().any(|e| e.matches(scheme, host, port)) {
            return Ok(());
        }
        let default_port = if scheme == "https" { 443 } else { 80 };
        let entry =
            if port == default_port { format!("{scheme}://{host}") } else { format!("{scheme}://{host}:{port}") };
        Err(Denial(format!(
            "HTTP to {scheme}://{host}:{port} refused: not in the allowlist of tool instance {:?}; to allow it, add {entry:?} to its grants.http",
            self.instance
        )))
    }

    /// Whether the instance may connect to `ip`, reached as `host`.
    pub fn check_addr(&self, host: &str, ip: IpAddr) -> Result<(), Denial> {
        let Some(kind) = special_range(ip) else {
            return Ok(());
        };
        // Only `private_networks` grants these, even for an allowlisted IP literal:
        // reaching loopback or metadata must be an explicit, separate decision.
        if self.private.iter().any(|c| c.contains(ip)) {
            return Ok(());
        }
        let ip = canonical(ip);
        let net = if ip.is_ipv4() { format!("{ip}/32") } else { format!("{ip}/128") };
        let via = if host.trim_matches(['[', ']']).parse::<IpAddr>().is_ok() {
            String::new()
        } else {
            format!(" ({host} resolves to it)")
        };
        Err(Denial(format!(
            "HTTP to {ip}{via} refused: it is {kind}; to allow it, add {net:?} to grants.private_networks of tool instance {:?}",
            self.instance
        )))
    }

    /// Resolves `host` (bounded by the timeout) and returns the first address
    /// the policy admits; the caller must connect to exactly that address.
    pub async fn resolve(&self, host: &str, port: u16) -> Result<SocketAddr, ResolveError> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = if let Ok(ip) = bare.parse::<IpAddr>() {
            vec![SocketAddr::new(ip, port)]
        } else {
            match tokio::time::timeout(self.timeout, tokio::net::lookup_host((bare, port))).await {
                Err(_) => return Err(ResolveError::Timeout),
                Ok(Err(_)) => return Err(ResolveError::NotFound),
                Ok(Ok(a)) => a.collect(),
            }
        };
        let mut first_denial = None;
        for a in &addrs {
            match self.check_addr(host, a.ip()) {
                Ok(()) => return Ok(*a),
                Err(d) => {
                    first_denial.get_or_insert(d);
                }
            }
        }
        Err(first_denial.map_or(ResolveError::NotFound, ResolveError::Denied))
    }
}

/// Why a host could not be turned into an address to connect to.
#[derive(Debug)]
pub enum ResolveError {
    /// Every address it resolves to is refused.
    Denied(Denial),
    /// DNS did not answer in time.
    Timeout,
    /// The name does not resolve.
    NotFound,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str], private: &[&str]) -> HttpPolicy {
        HttpPolicy::new(
            "t",
            allow.iter().map(|a| AllowEntry::parse(a).unwrap()).collect(),
            private.iter().map(|p| Cidr::parse(p).unwrap()).collect(),
            Duration::from_secs(2),
        )
    }

    #[test]
    fn special_ranges() {
        for ip in [
            "127.0.0.1",
            "10.0.0.1",
            "172.16.5.4",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
            "224.0.0.1",
        ] {
            assert!(special_range(ip.parse().unwrap()).is_some(), "{ip}");
        }
        for ip in ["8.8.8.8", "1.1.1.1", "2606:4700::1111"] {
            assert!(special_range(ip.parse().unwrap()).is_none(), "{ip}");
        }
        assert_eq!(special_range("169.254.169.254".parse().unwrap()), Some("a cloud metadata address"));
    }

    #[test]
    fn grants_name_private_addresses() {
        let p = policy(&["http://localhost:8080"], &[]);
        let d = p.check_addr("localhost", "127.0.0.1".parse().unwrap()).unwrap_err();
        assert!(d.0.contains("\"127.0.0.1/32\""), "{d}");
        assert!(d.0.contains("localhost resolves to it"), "{d}");
        let p = policy(&["http://localhost:8080"], &["127.0.0.0/8"]);
        assert!(p.check_addr("localhost", "127.0.0.1".parse().unwrap()).is_ok());
        let p = policy(&["http://127.0.0.1:8080"], &[]);
        assert!(p.check_addr("127.0.0.1", "127.0.0.1".parse().unwrap()).is_err());
        let p = policy(&["http://127.0.0.1:8080"], &["127.0.0.1/32"]);
        assert!(p.check_addr("127.0.0.1", "127.0.0.1".parse().unwrap()).is_ok());
        assert!(p.check_addr("127.0.0.1", "127.0.0.2".parse().unwrap()).is_err());
    }

    #[test]
    fn allowlist_message_names_the_entry() {
        let p = policy(&[], &[]);
        let d = p.check_target("http", "10.0.0.1", 80).unwrap_err();
        assert!(d.0.contains("\"http://10.0.0.1\""), "{d}");
    }

    #[tokio::test]
    async fn resolves_only_to_vetted_addresses() {
        let p = policy(&["http://localhost:1"], &[]);
        assert!(matches!(p.resolve("localhost", 1).await, Err(ResolveError::Denied(_))));
        let p = policy(&["http://localhost:1"], &["127.0.0.0/8", "::1/128"]);
        let a = p.resolve("localhost", 1).await.unwrap();
        assert!(a.ip().is_loopback());
    }
}
