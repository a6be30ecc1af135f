//! `oci://REGISTRY/REPO@sha256:HEX` and `oci://REGISTRY/REPO:TAG`.

use std::fmt;

use oci_client::Reference;

use crate::OciError;

/// The scheme of a registry reference in the config.
pub const SCHEME: &str = "oci://";

/// A component's registry reference, as the config names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciRef {
    /// As written, `oci://` included: the lock's key.
    text: String,
    reference: Reference,
}

impl OciRef {
    /// Parses `oci://REGISTRY/REPO@sha256:HEX` or `oci://REGISTRY/REPO:TAG`; the registry is
    /// always named (no implicit docker.io).
    pub fn parse(text: &str) -> Result<OciRef, OciError> {
        let bad = |why: &str| {
            OciError::Reference(format!(
                "{text:?} {why}: write oci://REGISTRY/REPOSITORY@sha256:DIGEST, or oci://REGISTRY/REPOSITORY:TAG"
            ))
        };
        let rest = text.strip_prefix(SCHEME).ok_or_else(|| bad("does not start with oci://"))?;
        let (registry, path) = rest.split_once('/').ok_or_else(|| bad("names no repository"))?;
        if registry.is_empty() || !(registry.contains('.') || registry.contains(':') || registry == "localhost") {
            return Err(bad("names no registry (a host name with a dot or a port, or localhost)"));
        }
        if !path.contains('@') && !path.rsplit('/').next().unwrap_or("").contains(':') {
            return Err(bad("has neither a digest nor a tag"));
        }
        let reference: Reference = rest.parse().map_err(|e| bad(&format!("does not parse ({e})")))?;
        if let Some(d) = reference.digest()
            && !is_sha256_digest(d)
        {
            return Err(bad("has a digest that is not sha256:<64 hex digits>"));
        }
        Ok(OciRef { text: text.to_string(), reference })
    }

    /// The reference, as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The registry (host and port).
    pub fn registry(&self) -> &str {
        self.reference.registry()
    }

    /// The digest it pins, if it names one.
    pub fn digest(&self) -> Option<&str> {
        self.reference.digest()
    }

    /// The tag it names, if any.
    pub fn tag(&self) -> Option<&str> {
        self.reference.tag()
    }

    /// The reference as the client takes it.
    pub(crate) fn reference(&self) -> &Reference {
        &self.reference
    }

    /// The same repository at `tag` (a signature's, say).
    pub(crate) fn at_tag(&self, tag: &str) -> Reference {
        Reference::with_tag(
            self.reference.registry().to_string(),
            self.reference.repository().to_string(),
            tag.to_string(),
        )
    }

    /// The registry and repository, without tag or digest (`127.0.0.1:5000/tools/echo`).
    pub fn repository(&self) -> String {
        format!("{}/{}", self.reference.registry(), self.reference.repository())
    }

    /// The same repository at `digest`.
    pub(crate) fn at(&self, digest: &str) -> Reference {
        Reference::with_digest(
            self.reference.registry().to_string(),
            self.reference.repository().to_string(),
            digest.to_string(),
        )
    }
}

impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Whether `digest` is `sha256:` and 64 lowercase hex digits: the only digests the host names a
/// cache file after (a registry's or a lock's digest never becomes a path otherwise).
pub(crate) fn is_sha256_digest(digest: &str) -> bool {
    digest
        .strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// Whether `registry` (`host[:port]`) is this machine: spoken to over plain HTTP.
pub(crate) fn is_loopback(registry: &str) -> bool {
    let host = match registry.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => registry,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_name_a_registry_and_a_digest_or_tag() {
        let d = format!("sha256:{}", "ab".repeat(32));
        let r = OciRef::parse(&format!("oci://127.0.0.1:5000/tools/echo@{d}")).unwrap();
        assert_eq!((r.registry(), r.digest(), r.tag()), ("127.0.0.1:5000", Some(d.as_str()), None));
        let r = OciRef::parse("oci://ghcr.io/me/echo:v1").unwrap();
        assert_eq!((r.registry(), r.tag()), ("ghcr.io", Some("v1")));
        for bad in [
            "ghcr.io/me/echo:v1",
            "oci://echo:v1",
            "oci://me/echo:v1",
            "oci://ghcr.io/me/echo",
            "oci://ghcr.io/me/echo@sha256:abc",
            "oci://ghcr.io/me/Echo:v1",
        ] {
            let e = OciRef::parse(bad).unwrap_err().to_string();
            assert!(e.contains("oci://REGISTRY/REPOSITORY@sha256:DIGEST"), "{bad}: {e}");
        }
    }

    #[test]
    fn only_sha256_hex_digests_are_digests() {
        assert!(is_sha256_digest(&format!("sha256:{}", "0a".repeat(32))));
        for bad in [
            format!("sha256:{}", "0A".repeat(32)),
            format!("sha256:../../../{}", "a".repeat(55)),
            format!("sha512:{}", "a".repeat(64)),
            "sha256:".to_string(),
        ] {
            assert!(!is_sha256_digest(&bad), "{bad}");
        }
    }

    #[test]
    fn only_loopback_registries_are_plain_http() {
        for (r, want) in [
            ("127.0.0.1:5000", true),
            ("localhost:5000", true),
            ("[::1]:5000", true),
            ("localhost", true),
            ("ghcr.io", false),
            ("10.0.0.1:5000", false),
            ("127.0.0.1.example.com", false),
        ] {
            assert_eq!(is_loopback(r), want, "{r}");
        }
    }
}
