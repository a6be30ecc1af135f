//! Allowlist entries and CIDR blocks (networks as `ipnet` has them), parsed once at config load.

use std::net::IpAddr;

/// Which host an allowlist entry matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// Exactly this (lowercase) name.
    Name(String),
    /// Any subdomain of this name (`*.example.com` matches `a.example.com`, not `example.com`).
    Subdomains(String),
    /// This IP address. A special-purpose address also needs a `private_networks` grant.
    Ip(IpAddr),
}

/// One allowlist entry: `scheme://host[:port]`, where scheme is `http`, `https`
/// or `*`, and host may start with `*.`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowEntry {
    /// `None` matches both http and https.
    pub scheme: Option<String>,
    /// The host pattern.
    pub host: HostPattern,
    /// `None` means the scheme's default port.
    pub port: Option<u16>,
}

impl AllowEntry {
    /// Parses `https://example.com`, `http://127.0.0.1:8080`, `*://*.example.com`.
    pub fn parse(entry: &str) -> Result<Self, String> {
        let form =
            "write entries as scheme://host[:port], like \"https://api.example.com\" or \"http://127.0.0.1:8080\"";
        let (scheme, rest) = entry.split_once("://").ok_or_else(|| format!("{entry:?} has no scheme; {form}"))?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "http" | "https" => Some(scheme.to_ascii_lowercase()),
            "*" => None,
            other => {
                return Err(format!("{entry:?}: scheme {other:?} is not allowed (http, https or *); {form}"));
            }
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.is_empty() || rest.contains('/') || rest.contains('@') || rest.contains('?') {
            return Err(format!("{entry:?} must name only a host and port, no path or user; {form}"));
        }
        let (host, port) = split_host_port(rest).map_err(|m| format!("{entry:?}: {m}; {form}"))?;
        let host = if let Some(suffix) = host.strip_prefix("*.") {
            check_name(suffix).map_err(|m| format!("{entry:?}: {m}"))?;
            HostPattern::Subdomains(suffix.to_ascii_lowercase())
        } else if let Ok(ip) = host.parse::<IpAddr>() {
            HostPattern::Ip(ip)
        } else {
            check_name(host).map_err(|m| format!("{entry:?}: {m}"))?;
            HostPattern::Name(host.to_ascii_lowercase())
        };
        Ok(AllowEntry { scheme, host, port })
    }

    /// Whether a request to `scheme://host:port` matches this entry.
    pub fn matches(&self, scheme: &str, host: &str, port: u16) -> bool {
        if let Some(s) = &self.scheme
            && s != scheme
        {
            return false;
        }
        let default_port = if scheme == "https" { 443 } else { 80 };
        if self.port.unwrap_or(default_port) != port {
            return false;
        }
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        match &self.host {
            HostPattern::Name(n) => *n == host,
            HostPattern::Subdomains(s) => host.len() > s.len() + 1 && host.ends_with(&format!(".{s}")),
            HostPattern::Ip(ip) => {
                host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().is_ok_and(|h| h == *ip)
            }
        }
    }
}

/// Splits `host[:port]`, accepting bracketed IPv6 literals.
pub(crate) fn split_host_port(s: &str) -> Result<(&str, Option<u16>), String> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let end = rest.find(']').ok_or("unclosed [ in IPv6 address")?;
        let after = &rest[end + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return Err("unexpected text after ]".into()),
        };
        (&rest[..end], port)
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h, Some(p)),
            _ => (s, None),
        }
    };
    let port = match port {
        Some(p) => Some(p.parse::<u16>().map_err(|_| format!("invalid port {p:?}"))?),
        None => None,
    };
    if host.is_empty() {
        return Err("empty host".into());
    }
    Ok((host, port))
}

fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .split('.')
            .all(|l| !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
    if ok { Ok(()) } else { Err(format!("{name:?} is not a valid host name")) }
}

/// An IP network, `10.0.0.0/8` or `::1/128`; a bare address means a single host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr(ipnet::IpNet);

impl Cidr {
    /// Parses `addr/prefix` or a bare address.
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not a network; write it like \"127.0.0.1/32\", \"10.0.0.0/8\" or \"::1/128\"");
        let net = match s.split_once('/') {
            Some((a, p)) => format!("{}/{}", a.trim(), p.trim()).parse::<ipnet::IpNet>().map_err(|_| bad())?,
            None => ipnet::IpNet::from(s.trim().parse::<IpAddr>().map_err(|_| bad())?),
        };
        Ok(Cidr(net))
    }

    /// Whether `ip` lies in this network (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.contains(&canonical(ip))
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// An IPv6 address that carries an IPv4 one, as that IPv4 address: IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, not `::` or `::1`), IPv4-translated
/// (`::ffff:0:a.b.c.d`), NAT64 with the well-known prefix (`64:ff9b::a.b.c.d`, RFC 6052) and
/// 6to4 (`2002:AABB:CCDD::/48`, RFC 3056). A packet to any of them can reach that IPv4 host,
/// so the policy and `private_networks` judge them as it.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else { return ip };
    let seg = v6.segments();
    let low = std::net::Ipv4Addr::new((seg[6] >> 8) as u8, seg[6] as u8, (seg[7] >> 8) as u8, seg[7] as u8);
    if let Some(v4) = v6.to_ipv4_mapped() {
        IpAddr::V4(v4)
    } else if (seg[..6] == [0, 0, 0, 0, 0, 0] && u32::from(low) > 1)
        || seg[..6] == [0, 0, 0, 0, 0xffff, 0]
        || seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
    {
        IpAddr::V4(low)
    } else if seg[0] == 0x2002 {
        IpAddr::V4(std::net::Ipv4Addr::new((seg[1] >> 8) as u8, seg[1] as u8, (seg[2] >> 8) as u8, seg[2] as u8))
    } else {
        ip
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries() {
        let e = AllowEntry::parse("https://API.example.com").unwrap();
        assert!(e.matches("https", "api.example.com", 443));
        assert!(!e.matches("http", "api.example.com", 80));
        assert!(!e.matches("https", "api.example.com", 8443));
        assert!(!e.matches("https", "evil-api.example.com", 443));
        let w = AllowEntry::parse("*://*.example.com:8080").unwrap();
        assert!(w.matches("http", "a.b.example.com", 8080));
        assert!(!w.matches("http", "example.com", 8080));
        assert!(!w.matches("http", "aexample.com", 8080));
        let ip = AllowEntry::parse("http://[::1]:9000").unwrap();
        assert!(ip.matches("http", "[::1]", 9000));
        for bad in [
            "example.com",
            "ftp://x.com",
            "https://x.com/path",
            "https://u@x.com",
            "https://x.com:99999",
            "https://bad_host!",
        ] {
            assert!(AllowEntry::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cidrs() {
        let c = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(c.contains("10.1.2.3".parse().unwrap()));
        assert!(c.contains("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!c.contains("11.0.0.1".parse().unwrap()));
        assert!(Cidr::parse("127.0.0.1").unwrap().contains("127.0.0.1".parse().unwrap()));
        assert!(Cidr::parse("::1/129").is_err());
        assert!(Cidr::parse("localhost").is_err());
    }
}
