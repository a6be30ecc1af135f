//! The outgoing-HTTP keys of `[tools.NAME.grants]`: `http` (the allowlist), `private_networks`
//! and `http_timeout`, parsed once at load; a bad entry names its key and the accepted form.

use std::time::Duration;

use super::allowlist::{AllowEntry, Cidr};
use super::policy::HttpPolicy;
use crate::support::values::{HumanDuration, KeyError};

/// Default bound on each phase of an outgoing HTTP request.
pub const DEFAULT_HTTP_TIMEOUT: Duration = Duration::from_secs(30);

/// The policy of `instance` from its `http`, `private_networks` and `http_timeout` keys.
pub fn grant(
    instance: &str,
    http: &[String],
    private_networks: &[String],
    http_timeout: Option<HumanDuration>,
) -> Result<HttpPolicy, KeyError> {
    let mut allow = Vec::new();
    for (i, entry) in http.iter().enumerate() {
        allow.push(AllowEntry::parse(entry).map_err(|m| KeyError::new(format!("http[{i}]"), m))?);
    }
    let mut private = Vec::new();
    for (i, net) in private_networks.iter().enumerate() {
        private.push(Cidr::parse(net).map_err(|m| KeyError::new(format!("private_networks[{i}]"), m))?);
    }
    Ok(HttpPolicy::new(instance, allow, private, http_timeout.map_or(DEFAULT_HTTP_TIMEOUT, |d| d.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_and_networks_are_checked_by_key() {
        let p = grant("t", &["https://example.com".into()], &["10.0.0.0/8".into()], None).unwrap();
        assert_eq!(p.timeout(), DEFAULT_HTTP_TIMEOUT);
        assert!(p.check_target("https", "example.com", 443).is_ok());
        let e = grant("t", &["https://ok.example".into(), "ftp://x.com".into()], &[], None).unwrap_err();
        assert_eq!(e.key, "http[1]");
        assert!(e.message.contains("scheme"), "{}", e.message);
        let e = grant("t", &[], &["localhost".into()], None).unwrap_err();
        assert_eq!(e.key, "private_networks[0]");
        let t = HumanDuration(Duration::from_secs(3));
        assert_eq!(grant("t", &[], &[], Some(t)).unwrap().timeout(), Duration::from_secs(3));
    }
}
