//! `grants.couchbase`: which connection, which buckets and scopes; and the naming rules every
//! bucket, scope and index name passes before it reaches a request path.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::connection::Connection;
use crate::wit::CouchbaseError;
use quarry_support::limits::within_deadline;
use quarry_support::values::{HumanDuration, KeyError};

/// The default bound on one call, connecting included (never more than the deadline allows).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// The most rows (`limit`) or candidates (`k`) one search may ask for: the Search service's
/// default result window, beyond which a server refuses anyway.
pub const MAX_ROWS: u32 = 10_000;

/// Checks a bucket name against Couchbase's rules before it reaches a URL: 1 to 100 of
/// `A-Z a-z 0-9 _ - .`, not starting with `.`. Couchbase also allows `%`, which is refused here:
/// a name is put into request paths as it is, and `%2e%2e` would be a path segment `..`.
pub fn check_bucket_name(name: &str) -> std::result::Result<(), String> {
    let ok = (1..=100).contains(&name.len())
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "bucket name {} is not a Couchbase bucket name: 1 to 100 letters, digits, `_`, `-` and `.`, not starting with `.`",
            quoted(name)
        ))
    }
}

/// Checks a scope name: 1 to 251 of `A-Z a-z 0-9 _ -` (Couchbase's rule, without its `%`).
pub fn check_scope_name(name: &str) -> std::result::Result<(), String> {
    let ok =
        (1..=251).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!("scope name {} is not a Couchbase scope name: 1 to 251 letters, digits, `_` and `-`", quoted(name)))
    }
}

/// Checks a search index name: a letter, then letters, digits, `_` and `-` (the Search
/// service's rule), at most 255 bytes. With `qualified`, `bucket.scope.index` is accepted too
/// (how a cluster-level listing names a scoped index), each part checked by its own rule.
pub fn check_index_name(name: &str, qualified: bool) -> std::result::Result<(), String> {
    let short = |n: &str| {
        n.len() <= 255
            && n.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
            && n.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
    };
    let ok = short(name)
        || (qualified
            && name.len() <= 610
            && matches!(name.rsplitn(3, '.').collect::<Vec<_>>()[..], [i, s, b]
                if short(i) && check_scope_name(s).is_ok() && check_bucket_name(b).is_ok()));
    if ok {
        Ok(())
    } else {
        let form = if qualified { " (or `bucket.scope.index`)" } else { "" };
        Err(format!(
            "index name {} is not a Couchbase search index name: a letter, then letters, digits, `_` and `-`{form}",
            quoted(name)
        ))
    }
}

/// A guest-chosen name for a message: quoted, and cut to 64 characters so a hostile one
/// cannot make the error (and the log) large.
fn quoted(name: &str) -> String {
    quarry_support::text::quoted_prefix(name, 64)
}

/// `grants.couchbase` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGrant {
    connection: String,
    scopes: Vec<String>,
    timeout: Option<HumanDuration>,
}

/// What an instance may do with Couchbase (`[tools.NAME.grants.couchbase]`).
#[derive(Debug, Clone, PartialEq)]
pub struct CouchbaseGrant {
    /// The connection's name in the config, for messages.
    pub connection_name: String,
    /// The connection.
    pub connection: Arc<Connection>,
    /// `(bucket, scope)` pairs; scope `*` is the whole bucket.
    pub scopes: Vec<(String, String)>,
    /// Bound on each call, connecting included.
    pub timeout: Duration,
}

impl CouchbaseGrant {
    /// Whether any scope of `bucket` is granted.
    pub fn allows_bucket(&self, bucket: &str) -> bool {
        self.scopes.iter().any(|(b, _)| b == bucket)
    }

    /// Whether scope `scope` of `bucket` is granted.
    pub fn allows_scope(&self, bucket: &str, scope: &str) -> bool {
        self.scopes.iter().any(|(b, s)| b == bucket && (s == "*" || s == scope))
    }

    /// Whether the whole of `bucket` is granted (needed for its cluster-level indexes).
    pub fn allows_whole_bucket(&self, bucket: &str) -> bool {
        self.scopes.iter().any(|(b, s)| b == bucket && s == "*")
    }

    pub(super) fn granted(&self) -> String {
        self.scopes.iter().map(|(b, s)| format!("{b}.{s}")).collect::<Vec<_>>().join(", ")
    }

    pub(super) fn deny_bucket(&self, bucket: &str) -> CouchbaseError {
        CouchbaseError::Denied(format!(
            "bucket {bucket:?} is not in this instance's grants.couchbase.scopes ({}); add \"{bucket}.SCOPE\" to use it",
            self.granted()
        ))
    }
}

/// Validates `grants.couchbase`: a known connection, `bucket.scope` or `bucket.*` entries, and
/// a timeout inside the instance's deadline ([`quarry_support::limits::deadline_room`]).
pub fn grant(
    raw: RawGrant,
    connections: &BTreeMap<String, Arc<Connection>>,
    deadline: Duration,
) -> Result<CouchbaseGrant, KeyError> {
    let connection = connections.get(&raw.connection).cloned().ok_or_else(|| {
        let known_buckets: Vec<_> = connections.keys().map(String::as_str).collect();
        KeyError::new(
            "connection",
            format!(
                "no connection named {:?}; define [couchbase.{}] or use one of: {}",
                raw.connection,
                raw.connection,
                if known_buckets.is_empty() { "(none defined)".to_string() } else { known_buckets.join(", ") }
            ),
        )
    })?;
    if raw.scopes.is_empty() {
        return Err(KeyError::new(
            "scopes",
            "list the \"bucket.scope\" pairs this instance may use (\"bucket.*\" for a whole bucket)",
        ));
    }
    let mut scopes = Vec::new();
    for s in &raw.scopes {
        // Bucket names may hold dots, scope names may not: the scope is after the last one.
        match s.rsplit_once('.') {
            Some((b, sc)) if !b.is_empty() && !sc.is_empty() => {
                check_bucket_name(b).map_err(|m| KeyError::new("scopes", m))?;
                if sc != "*" {
                    check_scope_name(sc).map_err(|m| KeyError::new("scopes", m))?;
                }
                scopes.push((b.to_string(), sc.to_string()))
            }
            _ => return Err(KeyError::new("scopes", format!("{s:?} is not \"bucket.scope\" or \"bucket.*\""))),
        }
    }
    let timeout = within_deadline(raw.timeout, DEFAULT_TIMEOUT, deadline, "timeout")?;
    Ok(CouchbaseGrant { connection_name: raw.connection, connection, scopes, timeout })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::Secret;

    fn connections() -> BTreeMap<String, Arc<Connection>> {
        let c = Connection {
            connection_string: "couchbase://h".into(),
            username: "u".into(),
            password: Secret("p".into()),
            ca_certs: None,
            accept_invalid_certs: false,
        };
        BTreeMap::from([("main".to_string(), Arc::new(c))])
    }

    #[test]
    fn grant_keys_are_checked_and_the_timeout_fits_the_deadline() {
        let parse = |text: &str| grant(toml::from_str(text).unwrap(), &connections(), Duration::from_secs(10));
        let g = parse(
            r#"connection = "main"
scopes = ["travel.inventory", "my.bucket.*"]"#,
        )
        .unwrap();
        assert_eq!(g.scopes, [("travel".into(), "inventory".into()), ("my.bucket".into(), "*".into())]);
        assert_eq!(g.timeout, DEFAULT_TIMEOUT.min(Duration::from_secs(9)));
        for (text, key, says) in [
            (
                "connection = \"other\"\nscopes = [\"a.b\"]",
                "connection",
                "define [couchbase.other] or use one of: main",
            ),
            ("connection = \"main\"\nscopes = []", "scopes", "bucket.scope"),
            ("connection = \"main\"\nscopes = [\"travel\"]", "scopes", "is not \"bucket.scope\""),
            ("connection = \"main\"\nscopes = [\"../x.y\"]", "scopes", ""),
            ("connection = \"main\"\nscopes = [\"a.b\"]\ntimeout = \"1m\"", "timeout", "deadline"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.key == key && e.message.contains(says), "{text}: {e:?}");
        }
    }

    /// Names reach request paths as they are: only names by Couchbase's rules pass, and no name
    /// that a URL parser would turn into another path (dot segments, `/`, `?`, `#`, `%`).
    #[test]
    fn names_that_could_steer_a_request_path_are_refused() {
        for ok in ["travel", "travel-sample", "b_1", "my.bucket"] {
            assert!(check_bucket_name(ok).is_ok(), "{ok}");
        }
        for ok in ["inventory", "_default", "tenant-b"] {
            assert!(check_scope_name(ok).is_ok(), "{ok}");
        }
        for ok in ["hotels-vec", "idx_2"] {
            assert!(check_index_name(ok, false).is_ok(), "{ok}");
        }
        assert!(check_index_name("travel.inventory.hotels-vec", true).is_ok());
        assert!(check_index_name("my.bucket.inventory.idx", true).is_ok());
        let steering = [
            "",
            ".",
            "..",
            "../../../../../index/OTHER",
            "%2e%2e",
            "a/b",
            "idx?x=1",
            "idx#frag",
            "idx%2fother",
            "a b",
            "ä",
            "\\..",
        ];
        for bad in steering {
            assert!(check_bucket_name(bad).is_err(), "bucket {bad:?}");
            assert!(check_scope_name(bad).is_err(), "scope {bad:?}");
            assert!(check_index_name(bad, true).is_err(), "index {bad:?}");
        }
        assert!(check_bucket_name(".hidden").is_err());
        assert!(check_bucket_name(&"b".repeat(101)).is_err());
        assert!(check_scope_name("in.ventory").is_err());
        assert!(check_index_name("1idx", false).is_err());
        assert!(check_index_name("travel.inventory.hotels-vec", false).is_err());
        assert!(check_index_name("../inventory.idx", true).is_err());
        // The message shows at most 64 characters of a hostile name.
        let e = check_index_name(&"x/".repeat(1 << 20), false).unwrap_err();
        assert!(e.len() < 400, "{}", e.len());
    }

    #[test]
    fn grants_by_scope_and_bucket() {
        let g = CouchbaseGrant {
            connection_name: "c".into(),
            connection: Arc::new(Connection {
                connection_string: "couchbase://h".into(),
                username: "u".into(),
                password: Secret("p".into()),
                ca_certs: None,
                accept_invalid_certs: false,
            }),
            scopes: vec![("travel".into(), "inventory".into()), ("docs".into(), "*".into())],
            timeout: DEFAULT_TIMEOUT,
        };
        assert!(g.allows_scope("travel", "inventory"));
        assert!(!g.allows_scope("travel", "tenant_b"));
        assert!(!g.allows_whole_bucket("travel"));
        assert!(g.allows_scope("docs", "anything"));
        assert!(g.allows_whole_bucket("docs"));
        assert!(!g.allows_bucket("other"));
        assert_eq!(format!("{:?}", g.connection.password), "Secret(..)");
    }
}
