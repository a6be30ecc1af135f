//! `[couchbase.NAME]`: a named connection and its credentials, resolved at load.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use serde::Deserialize;

use super::errors::{Result, internal};
use quarry_support::values::{KeyError, expand_path};

/// `[couchbase.NAME]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConnection {
    connection_string: String,
    username: Option<String>,
    username_env: Option<String>,
    password: Option<String>,
    password_env: Option<String>,
    ca_file: Option<std::path::PathBuf>,
    #[serde(default)]
    accept_invalid_certs: bool,
}

/// A secret that `Debug` does not print.
#[derive(Clone, PartialEq)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// A named connection (`[couchbase.NAME]`), credentials resolved at load.
#[derive(Debug, Clone, PartialEq)]
pub struct Connection {
    /// `couchbase://…` or `couchbases://…`.
    pub connection_string: String,
    /// The RBAC user.
    pub username: String,
    /// Its password.
    pub password: Secret,
    /// CA certificates to trust instead of the system roots (TLS only), parsed at load.
    pub ca_certs: Option<Vec<CertificateDer<'static>>>,
    /// Skip certificate checks (TLS only; development clusters).
    pub accept_invalid_certs: bool,
}

/// Validates a `[couchbase.NAME]` connection and reads its credentials (from the environment
/// when `*_env` is given), so that a missing variable is reported at load, naming its key.
pub fn connection(base: &Path, raw: RawConnection) -> std::result::Result<Connection, KeyError> {
    let cs = raw.connection_string.trim().to_string();
    let tls = if cs.starts_with("couchbases://") {
        true
    } else if cs.starts_with("couchbase://") {
        false
    } else {
        return Err(KeyError::new(
            "connection_string",
            format!(
                "{cs:?} is not a Couchbase connection string: write \"couchbase://HOST\" (or couchbases:// for TLS)"
            ),
        ));
    };
    if cs.split_once("://").is_none_or(|(_, rest)| rest.is_empty()) {
        return Err(KeyError::new(
            "connection_string",
            format!("{cs:?} names no host, like \"couchbase://127.0.0.1\""),
        ));
    }
    if !tls && (raw.ca_file.is_some() || raw.accept_invalid_certs) {
        let k = if raw.ca_file.is_some() { "ca_file" } else { "accept_invalid_certs" };
        return Err(KeyError::new(k, "applies only to TLS connections: use a couchbases:// connection string"));
    }
    let secret = |plain: Option<String>,
                  env: Option<String>,
                  key: &'static str,
                  env_key: &'static str|
     -> std::result::Result<String, KeyError> {
        match (plain, env) {
            (Some(_), Some(_)) => Err(KeyError::new(key, format!("give either {key} or {env_key}, not both"))),
            (Some(v), None) if !v.is_empty() => Ok(v),
            (Some(_), None) => Err(KeyError::new(key, "is empty")),
            (None, Some(var)) => std::env::var(&var).ok().filter(|v| !v.is_empty()).ok_or_else(|| {
                KeyError::new(env_key, format!("environment variable {var} is not set; set it or write {key} directly"))
            }),
            (None, None) => Err(KeyError::new(key, format!("missing: give {key} or {env_key}"))),
        }
    };
    let username = secret(raw.username, raw.username_env, "username", "username_env")?;
    let password = secret(raw.password, raw.password_env, "password", "password_env")?;
    // Parsed here, so that a bad file is the operator's error at load, not a failure of the
    // first search.
    let ca_certs = match raw.ca_file {
        None => None,
        Some(p) => {
            let p = base.join(expand_path(&p).map_err(|m| KeyError::new("ca_file", m))?);
            let pem =
                std::fs::read(&p).map_err(|e| KeyError::new("ca_file", format!("cannot read {}: {e}", p.display())))?;
            Some(ca_certificates(&pem).map_err(|m| KeyError::new("ca_file", format!("{}: {m}", p.display())))?)
        }
    };
    Ok(Connection {
        connection_string: cs,
        username,
        password: Secret(password),
        ca_certs,
        accept_invalid_certs: raw.accept_invalid_certs,
    })
}

/// The certificates of a PEM bundle, or why there are none.
fn ca_certificates(pem: &[u8]) -> std::result::Result<Vec<CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| format!("not PEM: {e}"))?;
    if certs.is_empty() {
        return Err("holds no certificate; give the cluster's CA in PEM (-----BEGIN CERTIFICATE-----)".into());
    }
    Ok(certs)
}

/// The SDK's cluster for connection `c`. Unbounded (the SDK retries a refused password or a
/// closed port until it is dropped): callers bound it.
pub(super) async fn connect(c: &Connection) -> Result<couchbase::cluster::Cluster> {
    let auth = couchbase::authenticator::PasswordAuthenticator::new(&c.username, &c.password.0);
    let mut opts = couchbase::options::cluster_options::ClusterOptions::new(auth.into());
    if c.connection_string.starts_with("couchbases://") {
        let mut tls =
            couchbase::options::cluster_options::TlsOptions::new().danger_accept_invalid_certs(c.accept_invalid_certs);
        if let Some(certs) = &c.ca_certs {
            tls = tls.add_ca_certificates(certs.clone());
        }
        opts = opts.tls_options(tls);
    }
    couchbase::cluster::Cluster::connect(&c.connection_string, opts).await.map_err(|e| super::errors::sdk_error(&e))
}

/// The TLS settings of the core agent, as the SDK derives its own from `TlsOptions`.
pub(super) fn rustls_config(c: &Connection) -> Result<Arc<rustls::ClientConfig>> {
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(internal)?;
    let builder = if c.accept_invalid_certs {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(couchbase_core::insecure_certverfier::InsecureCertVerifier {}))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        match &c.ca_certs {
            Some(certs) => {
                for cert in certs {
                    roots.add(cert.clone()).map_err(internal)?;
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        builder.with_root_certificates(roots)
    };
    Ok(Arc::new(builder.with_no_client_auth()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(extra: &str) -> RawConnection {
        toml::from_str(&format!("connection_string = \"couchbases://db\"\nusername = \"u\"\npassword = \"p\"\n{extra}"))
            .unwrap()
    }

    #[test]
    fn the_ca_file_is_parsed_at_load() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("junk.pem"), "not a certificate").unwrap();
        std::fs::write(dir.path().join("bad.pem"), "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n")
            .unwrap();
        let e = connection(dir.path(), raw("ca_file = \"junk.pem\"")).unwrap_err();
        assert_eq!(e.key, "ca_file");
        assert!(e.message.contains("junk.pem: holds no certificate"), "{}", e.message);
        let e = connection(dir.path(), raw("ca_file = \"bad.pem\"")).unwrap_err();
        assert!(e.message.contains("bad.pem: not PEM"), "{}", e.message);
        let e = connection(dir.path(), raw("ca_file = \"missing.pem\"")).unwrap_err();
        assert!(e.message.contains("cannot read"), "{}", e.message);
        let c = connection(dir.path(), raw("")).unwrap();
        assert!(c.ca_certs.is_none());
        assert_eq!(format!("{:?}", c.password), "Secret(..)");
    }

    #[test]
    fn credentials_and_connection_strings_name_their_key() {
        let base = Path::new("/");
        let bad: RawConnection =
            toml::from_str("connection_string = \"http://db\"\nusername = \"u\"\npassword = \"p\"").unwrap();
        assert_eq!(connection(base, bad).unwrap_err().key, "connection_string");
        let both: RawConnection = toml::from_str(
            "connection_string = \"couchbase://db\"\nusername = \"u\"\npassword = \"p\"\npassword_env = \"X\"",
        )
        .unwrap();
        let e = connection(base, both).unwrap_err();
        assert_eq!(
            (e.key.as_str(), e.message.as_str()),
            ("password", "give either password or password_env, not both")
        );
        let unset: RawConnection = toml::from_str(
            "connection_string = \"couchbase://db\"\nusername = \"u\"\npassword_env = \"QUARRY_TEST_UNSET_VAR_42\"",
        )
        .unwrap();
        assert_eq!(connection(base, unset).unwrap_err().key, "password_env");
        let plain: RawConnection = toml::from_str(
            "connection_string = \"couchbase://db\"\nusername = \"u\"\npassword = \"p\"\nca_file = \"x\"",
        )
        .unwrap();
        assert_eq!(connection(base, plain).unwrap_err().key, "ca_file");
    }
}
