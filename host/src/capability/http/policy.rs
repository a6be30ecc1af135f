//! The decision: may this instance connect to this URL, and to which address.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::allowlist::{AllowEntry, Cidr, canonical};

/// Name lookups running at once in the whole host. `getaddrinfo` cannot be cancelled: a lookup
/// that outlives its timeout keeps its thread until the resolver gives up, so the threads a
/// hung DNS server can pin are bounded by this, and never taken from the runtime's blocking
/// pool (which every instance's file I/O uses).
pub const LOOKUPS_IN_HOST: usize = 8;
/// Name lookups one instance may have running at once (counted until each thread returns).
pub const LOOKUPS_PER_INSTANCE: usize = 2;

/// The lookup threads a store's requests may take: its instance's share of the app's.
#[derive(Clone)]
pub struct Lookups {
    /// The instance's, [`LOOKUPS_PER_INSTANCE`].
    pub instance: Arc<Semaphore>,
    /// The app's, [`LOOKUPS_IN_HOST`], shared by every instance (see [`super::AppState`]).
    pub host: Arc<Semaphore>,
}

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
pub struct Refusal(pub String);

/// The kind of special-purpose network `ip` belongs to, if any. Such addresses
/// are refused unless a grant names them. An IPv6 address that embeds an IPv4 one (mapped,
/// compatible, translated, NAT64, 6to4) is judged as the IPv4 address it carries; Teredo and
/// local-use NAT64 (whose IPv4 part depends on the site) are special outright.
pub fn special_range(ip: IpAddr) -> Option<&'static str> {
    match canonical(ip) {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            if v4 == Ipv4Addr::new(169, 254, 169, 254)
                || v4 == Ipv4Addr::new(100, 100, 100, 200)
                || v4 == Ipv4Addr::new(168, 63, 129, 16)
                || v4 == Ipv4Addr::new(192, 0, 0, 192)
            {
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
            } else if o[0] == 192 && o[1] == 0 && o[2] == 0 {
                Some("an IETF protocol-assignment address (192.0.0.0/24)")
            } else if o[0] == 198 && (o[1] & 0xfe) == 18 {
                Some("a benchmarking address (198.18.0.0/15), as fake-IP proxies answer")
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
            } else if (seg[0] & 0xffc0) == 0xfec0 {
                Some("a site-local address")
            } else if seg[0] == 0x2001 && seg[1] == 0 {
                Some("a Teredo tunnel address")
            } else if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2] == 1 {
                Some("a local-use NAT64 address")
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

    /// The instance the policy belongs to.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Whether the allowlist admits `scheme://host:port` (before any resolution).
    pub fn check_target(&self, scheme: &str, host: &str, port: u16) -> Result<(), Refusal> {
        if self.allow.iter().any(|e| e.matches(scheme, host, port)) {
            return Ok(());
        }
        let default_port = if scheme == "https" { 443 } else { 80 };
        // A guest chooses the host: the message (kept, logged, shown) holds at most a name's length of it.
        let host = crate::support::text::cut(host, 253);
        let entry =
            if port == default_port { format!("{scheme}://{host}") } else { format!("{scheme}://{host}:{port}") };
        Err(Refusal(format!(
            "HTTP to {scheme}://{host}:{port} refused: not in the allowlist of tool instance {:?}; to allow it, add {entry:?} to its grants.http",
            self.instance
        )))
    }

    /// Whether the instance may connect to `ip`, reached as `host`.
    pub fn check_addr(&self, host: &str, ip: IpAddr) -> Result<(), Refusal> {
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
            format!(" ({} resolves to it)", crate::support::text::cut(host, 253))
        };
        Err(Refusal(format!(
            "HTTP to {ip}{via} refused: it is {kind}; to allow it, add {net:?} to grants.private_networks of tool instance {:?}",
            self.instance
        )))
    }

    /// Resolves `host` (bounded by the timeout, on the bounded set of threads of `lookups`) and
    /// returns the first address the policy admits; the caller must connect to exactly that
    /// address.
    pub async fn resolve(&self, host: &str, port: u16, lookups: &Lookups) -> Result<SocketAddr, ResolveError> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = if let Ok(ip) = bare.parse::<IpAddr>() {
            vec![SocketAddr::new(ip, port)]
        } else {
            let name = bare.to_string();
            let lookup = move || std::net::ToSocketAddrs::to_socket_addrs(&(name.as_str(), port)).map(Vec::from_iter);
            lookup_bounded(self.timeout, &lookups.instance, &lookups.host, lookup).await?
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

/// Runs `lookup` (a blocking name resolution) on a thread of its own once it holds a permit of
/// both `instance` and `host`, and waits at most `timeout` for the permits and the answer. The
/// thread keeps its permits until the lookup returns, however long after the timeout that is.
pub async fn lookup_bounded(
    timeout: Duration,
    instance: &Arc<Semaphore>,
    host: &Arc<Semaphore>,
    lookup: impl FnOnce() -> std::io::Result<Vec<SocketAddr>> + Send + 'static,
) -> Result<Vec<SocketAddr>, ResolveError> {
    let run = async {
        let mine = instance.clone().acquire_owned().await.map_err(|_| ResolveError::Timeout)?;
        let shared = host.clone().acquire_owned().await.map_err(|_| ResolveError::Timeout)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("quarry-dns".into())
            .spawn(move || {
                let answer = lookup();
                drop((mine, shared));
                let _ = tx.send(answer);
            })
            .map_err(|_| ResolveError::Timeout)?;
        match rx.await {
            Ok(Ok(addrs)) => Ok(addrs),
            Ok(Err(_)) | Err(_) => Err(ResolveError::NotFound),
        }
    };
    tokio::time::timeout(timeout, run).await.unwrap_or(Err(ResolveError::Timeout))
}

/// Why a host could not be turned into an address to connect to.
#[derive(Debug)]
pub enum ResolveError {
    /// Every address it resolves to is refused.
    Denied(Refusal),
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

    /// The classifier over a table of addresses: each with the class it must get (`None`: an
    /// ordinary public address). Embedded IPv4 forms get the class of the address they carry.
    #[test]
    fn special_ranges() {
        let table: &[(&str, Option<&str>)] = &[
            // Already refused before embedded forms were handled.
            ("127.0.0.1", Some("a loopback address")),
            ("10.0.0.1", Some("a private address")),
            ("172.16.5.4", Some("a private address")),
            ("192.168.1.1", Some("a private address")),
            ("169.254.169.254", Some("a cloud metadata address")),
            ("169.254.1.1", Some("a link-local address")),
            ("100.64.0.1", Some("a shared (carrier-grade NAT) address")),
            ("100.100.100.200", Some("a cloud metadata address")),
            ("0.0.0.0", Some("an unspecified address")),
            ("::", Some("an unspecified address")),
            ("::1", Some("a loopback address")),
            ("fe80::1", Some("a link-local address")),
            ("fd00:ec2::254", Some("a cloud metadata address")),
            ("fd20:ce::254", Some("a private (unique local) address")),
            ("::ffff:127.0.0.1", Some("a loopback address")),
            ("::ffff:169.254.169.254", Some("a cloud metadata address")),
            ("224.0.0.1", Some("a broadcast, multicast or reserved address")),
            ("255.255.255.255", Some("a broadcast, multicast or reserved address")),
            // IPv4-compatible (::/96) and IPv4-translated (::ffff:0:0:0/96).
            ("::127.0.0.1", Some("a loopback address")),
            ("::a9fe:a9fe", Some("a cloud metadata address")),
            ("::ffff:0:7f00:1", Some("a loopback address")),
            ("::ffff:0:a00:5", Some("a private address")),
            // NAT64, well-known prefix: the embedded address decides.
            ("64:ff9b::a9fe:a9fe", Some("a cloud metadata address")),
            ("64:ff9b::a00:5", Some("a private address")),
            ("64:ff9b::7f00:1", Some("a loopback address")),
            ("64:ff9b::808:808", None),
            // Local-use NAT64, Teredo, site-local: special outright.
            ("64:ff9b:1::a00:5", Some("a local-use NAT64 address")),
            ("64:ff9b:1:ffff::808:808", Some("a local-use NAT64 address")),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Some("a Teredo tunnel address")),
            ("fec0::1", Some("a site-local address")),
            // 6to4: the IPv4 address in bits 16-47.
            ("2002:a9fe:a9fe::1", Some("a cloud metadata address")),
            ("2002:c0a8:101::1", Some("a private address")),
            ("2002:808:808::1", None),
            // IPv4 special ranges the first version missed.
            ("192.0.0.192", Some("a cloud metadata address")),
            ("192.0.0.170", Some("an IETF protocol-assignment address (192.0.0.0/24)")),
            ("198.18.0.1", Some("a benchmarking address (198.18.0.0/15), as fake-IP proxies answer")),
            ("198.19.255.254", Some("a benchmarking address (198.18.0.0/15), as fake-IP proxies answer")),
            ("168.63.129.16", Some("a cloud metadata address")),
            // Public addresses stay reachable.
            ("8.8.8.8", None),
            ("1.1.1.1", None),
            ("198.20.0.1", None),
            ("192.0.1.1", None),
            ("2606:4700::1111", None),
            ("2001:db9::1", None),
            ("2001:1::1", None),
        ];
        for (ip, want) in table {
            assert_eq!(special_range(ip.parse().unwrap()), *want, "{ip}");
        }
    }

    #[test]
    fn private_networks_cover_embedded_forms() {
        // A grant of an IPv4 network also covers that network reached through NAT64 or 6to4.
        let p = policy(&["http://[64:ff9b::a00:5]"], &["10.0.0.0/8"]);
        assert!(p.check_addr("[64:ff9b::a00:5]", "64:ff9b::a00:5".parse().unwrap()).is_ok());
        let p = policy(&["http://[64:ff9b::a9fe:a9fe]"], &[]);
        let d = p.check_addr("[64:ff9b::a9fe:a9fe]", "64:ff9b::a9fe:a9fe".parse().unwrap()).unwrap_err();
        assert!(d.0.contains("cloud metadata") && d.0.contains("\"169.254.169.254/32\""), "{d}");
    }

    #[tokio::test]
    async fn a_hung_lookup_times_out_and_pins_a_bounded_number_of_threads() {
        let host = Arc::new(Semaphore::new(3));
        let instance = Arc::new(Semaphore::new(2));
        let (release, hold) = std::sync::mpsc::channel::<()>();
        let hold = Arc::new(std::sync::Mutex::new(hold));
        let hung = |hold: Arc<std::sync::Mutex<std::sync::mpsc::Receiver<()>>>| {
            move || {
                let _ = hold.lock().unwrap().recv_timeout(Duration::from_secs(10));
                Ok(Vec::new())
            }
        };
        let t = Duration::from_millis(100);
        for _ in 0..5 {
            let r = lookup_bounded(t, &instance, &host, hung(hold.clone())).await;
            assert!(matches!(r, Err(ResolveError::Timeout)));
        }
        // Only the instance's two permits went to threads; the host keeps the rest for others.
        assert_eq!(instance.available_permits(), 0);
        assert_eq!(host.available_permits(), 1);
        let other = Arc::new(Semaphore::new(2));
        let ok = lookup_bounded(t, &other, &host, || Ok(vec!["1.2.3.4:80".parse().unwrap()])).await;
        assert!(ok.is_ok());
        drop(release);
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
        let lookups = Lookups {
            instance: Arc::new(Semaphore::new(LOOKUPS_PER_INSTANCE)),
            host: Arc::new(Semaphore::new(LOOKUPS_IN_HOST)),
        };
        let p = policy(&["http://localhost:1"], &[]);
        assert!(matches!(p.resolve("localhost", 1, &lookups).await, Err(ResolveError::Denied(_))));
        let p = policy(&["http://localhost:1"], &["127.0.0.0/8", "::1/128"]);
        let a = p.resolve("localhost", 1, &lookups).await.unwrap();
        assert!(a.ip().is_loopback());
    }
}
