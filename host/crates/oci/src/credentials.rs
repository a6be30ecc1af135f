//! Registry credentials, each scoped to the registry it is for.
//!
//! - **A credential names its registry.** The environment pair `QUARRY_OCI_USERNAME` /
//!   `QUARRY_OCI_PASSWORD` is for the registry `QUARRY_OCI_REGISTRY` names (the pair without it
//!   is refused, saying so); a docker config entry is for the registry of its key. A config that
//!   names another registry gets no credential at all.
//! - **Only to the host it is for.** A registry may send a client to a token service (a
//!   `WWW-Authenticate: Bearer realm="…"` challenge); the credential goes there only when the
//!   realm is on the registry's own host. Otherwise the client asks the realm anonymously, and
//!   the log says why the credential was kept back.
//! - **Not over plain HTTP**, except to a loopback registry whose credential says so: a key
//!   (`QUARRY_OCI_REGISTRY`, or the docker config's) written `http://127.0.0.1:5000` marks that
//!   registry insecure on purpose; a bare `host:port` or `https://…` is for HTTPS only. Registries
//!   off this machine are always spoken to over HTTPS.
//!
//! The check is made against the registry's own challenge, fetched without a credential just
//! before the credential is handed to the registry client. A registry that answers the check
//! one way and the client another is the very registry the credential is for: it could keep
//! the credential itself.

use std::time::Duration;

use oci_client::secrets::RegistryAuth;

use crate::OciError;
use crate::reference::is_loopback;

/// A credential and where it may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Credential {
    user: String,
    password: String,
    /// Its key marks its (loopback) registry as spoken to over plain HTTP on purpose.
    plain_http: bool,
}

/// How long the challenge check may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

/// The authentication the registry client gets for `registry`: its credential when one is
/// scoped to it and may go where the registry would send it, else none.
pub async fn auth_for(registry: &str) -> Result<RegistryAuth, OciError> {
    let var = |v: &str| std::env::var(v).ok().filter(|s| !s.is_empty());
    let Some(c) = credential_for(registry, var, docker_config().as_deref())? else {
        return Ok(RegistryAuth::Anonymous);
    };
    let plain = is_loopback(registry);
    if plain && !c.plain_http {
        tracing::warn!(target: "quarry::oci", %registry, "the credential for {registry} is not sent over plain HTTP: write its key as http://{registry} (QUARRY_OCI_REGISTRY or the docker config) to mark this loopback registry insecure on purpose");
        return Ok(RegistryAuth::Anonymous);
    }
    match challenge(registry, plain).await {
        Ok(Some(realm)) => match realm_refusal(&realm, registry, c.plain_http) {
            None => Ok(basic(c)),
            Some(why) => {
                tracing::warn!(target: "quarry::oci", %registry, %realm, "the credential for {registry} is kept back: {why}");
                Ok(RegistryAuth::Anonymous)
            }
        },
        // No token service: the registry itself takes the credential (Basic), or none is needed.
        Ok(None) => Ok(basic(c)),
        Err(e) => {
            tracing::warn!(target: "quarry::oci", %registry, "the credential for {registry} is kept back: its challenge could not be read ({e})");
            Ok(RegistryAuth::Anonymous)
        }
    }
}

fn basic(c: Credential) -> RegistryAuth {
    RegistryAuth::Basic(c.user, c.password)
}

/// The docker config's text (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`).
fn docker_config() -> Option<Vec<u8>> {
    let var = |v: &str| std::env::var(v).ok().filter(|s| !s.is_empty());
    let path = var("DOCKER_CONFIG")
        .map(|d| std::path::PathBuf::from(d).join("config.json"))
        .or_else(|| var("HOME").map(|h| std::path::PathBuf::from(h).join(".docker/config.json")));
    path.and_then(|p| std::fs::read(p).ok())
}

/// The credential scoped to `registry`: the environment pair when `QUARRY_OCI_REGISTRY` names
/// it, else the docker config's entry for it.
pub(crate) fn credential_for(
    registry: &str,
    var: impl Fn(&str) -> Option<String>,
    docker: Option<&[u8]>,
) -> Result<Option<Credential>, OciError> {
    if let (Some(user), Some(password)) = (var("QUARRY_OCI_USERNAME"), var("QUARRY_OCI_PASSWORD")) {
        let Some(scope) = var("QUARRY_OCI_REGISTRY") else {
            return Err(OciError::Registry {
                registry: registry.to_string(),
                message: "QUARRY_OCI_USERNAME and QUARRY_OCI_PASSWORD are set without QUARRY_OCI_REGISTRY: set it to the registry they are for (host[:port], or http://host:port for a loopback registry without TLS); a credential is sent only to its registry".into(),
            });
        };
        let (plain_http, host) = scope_of(&scope);
        if host == registry {
            return Ok(Some(Credential { user, password, plain_http }));
        }
    }
    Ok(docker.and_then(|config| docker_auth(config, registry)))
}

/// A credential key (`https://reg.example.com/`, `reg.example.com`, `http://127.0.0.1:5000`)
/// as (whether it says plain HTTP, its `host[:port]`).
fn scope_of(key: &str) -> (bool, &str) {
    let key = key.trim();
    let (plain, rest) = match key.strip_prefix("http://") {
        Some(rest) => (true, rest),
        None => (false, key.strip_prefix("https://").unwrap_or(key)),
    };
    (plain, rest.trim_end_matches('/'))
}

/// The credential of `registry` in a docker config's `auths` (`"auth": base64("user:pass")`).
fn docker_auth(config: &[u8], registry: &str) -> Option<Credential> {
    use base64::Engine as _;
    let v: serde_json::Value = serde_json::from_slice(config).ok()?;
    let auths = v.get("auths")?.as_object()?;
    let (key, entry) = auths.iter().find(|(k, _)| scope_of(k).1 == registry)?;
    let decoded = base64::engine::general_purpose::STANDARD.decode(entry.get("auth")?.as_str()?).ok()?;
    let (user, password) = std::str::from_utf8(&decoded).ok()?.split_once(':')?;
    Some(Credential { user: user.to_string(), password: password.to_string(), plain_http: scope_of(key).0 })
}

/// The realm of `registry`'s Bearer challenge, read from an anonymous `GET /v2/`; none when
/// it sends no Bearer challenge.
async fn challenge(registry: &str, plain: bool) -> Result<Option<String>, String> {
    let client = reqwest::Client::builder()
        .connect_timeout(crate::CONNECT_TIMEOUT)
        .timeout(CHECK_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| e.to_string())?;
    let url = format!("{}://{registry}/v2/", if plain { "http" } else { "https" });
    let res = client.get(&url).send().await.map_err(|e| e.to_string())?;
    Ok(res
        .headers()
        .get_all(reqwest::header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(bearer_realm))
}

/// The `realm` of a `Bearer` challenge.
fn bearer_realm(header: &str) -> Option<String> {
    let (scheme, params) = header.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let at = params.to_ascii_lowercase().find("realm=")?;
    let value = &params[at + "realm=".len()..];
    let value = match value.strip_prefix('"') {
        Some(quoted) => &quoted[..quoted.find('"')?],
        None => value.split(',').next()?.trim(),
    };
    Some(value.to_string())
}

/// Why a credential for `registry` may not go to token service `realm`, or none when it may:
/// the realm must be on the registry's own host, over HTTPS, or over plain HTTP on a loopback
/// registry marked so (`plain_http`).
fn realm_refusal(realm: &str, registry: &str, plain_http: bool) -> Option<String> {
    let Ok(url) = reqwest::Url::parse(realm) else {
        return Some(format!("its token service {realm:?} is not a URL"));
    };
    let registry_host = host_of(registry);
    let realm_host = url.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
    if !realm_host.eq_ignore_ascii_case(registry_host) {
        return Some(format!(
            "its token service is on another host ({realm_host}); a credential goes only to the host it is for"
        ));
    }
    match url.scheme() {
        "https" => None,
        "http" if plain_http && is_loopback(registry) => None,
        scheme => Some(format!(
            "its token service is reached over {scheme}://; a credential goes over plain HTTP only to a loopback registry whose key says http://"
        )),
    }
}

/// The host of `host[:port]` (an IPv6 literal without its brackets).
fn host_of(registry: &str) -> &str {
    let host = match registry.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !h.ends_with(':') => h,
        _ => registry,
    };
    host.trim_start_matches('[').trim_end_matches(']')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn docker_config_auths_are_read_for_their_registry() {
        // base64("me:secret")
        let config = br#"{"auths": {"https://reg.example.com": {"auth": "bWU6c2VjcmV0"}, "other:5000": {}, "http://127.0.0.1:5000": {"auth": "bWU6c2VjcmV0"}}}"#;
        let me = |plain_http| Some(Credential { user: "me".into(), password: "secret".into(), plain_http });
        assert_eq!(docker_auth(config, "reg.example.com"), me(false));
        assert_eq!(docker_auth(config, "127.0.0.1:5000"), me(true));
        assert_eq!(docker_auth(config, "other:5000"), None);
        assert_eq!(docker_auth(b"not json", "reg.example.com"), None);
    }

    /// The environment pair goes to the registry it names, and to no other.
    #[test]
    fn the_environment_pair_is_for_the_registry_it_names() {
        let pair =
            &[("QUARRY_OCI_USERNAME", "u"), ("QUARRY_OCI_PASSWORD", "p"), ("QUARRY_OCI_REGISTRY", "reg.example.com")];
        let c = credential_for("reg.example.com", env(pair), None).unwrap().unwrap();
        assert_eq!((c.user.as_str(), c.plain_http), ("u", false));
        assert_eq!(credential_for("evil.example.com", env(pair), None).unwrap(), None);
        let unscoped = &[("QUARRY_OCI_USERNAME", "u"), ("QUARRY_OCI_PASSWORD", "p")];
        let e = credential_for("reg.example.com", env(unscoped), None).unwrap_err().to_string();
        assert!(e.contains("without QUARRY_OCI_REGISTRY") && e.contains("sent only to its registry"), "{e}");
        let local = &[
            ("QUARRY_OCI_USERNAME", "u"),
            ("QUARRY_OCI_PASSWORD", "p"),
            ("QUARRY_OCI_REGISTRY", "http://127.0.0.1:5000/"),
        ];
        assert!(credential_for("127.0.0.1:5000", env(local), None).unwrap().unwrap().plain_http);
        assert_eq!(credential_for("127.0.0.1:5001", env(local), None).unwrap(), None);
    }

    /// A token service elsewhere, or over plain HTTP, gets no credential.
    #[test]
    fn a_realm_gets_the_credential_only_on_its_registrys_host_and_over_https() {
        assert_eq!(realm_refusal("https://ghcr.io/token", "ghcr.io", false), None);
        assert_eq!(realm_refusal("https://reg.example.com:8443/auth", "reg.example.com:5000", false), None);
        let other = realm_refusal("https://auth.evil.example/token", "reg.example.com", false).unwrap();
        assert!(other.contains("another host (auth.evil.example)"), "{other}");
        let plain = realm_refusal("http://reg.example.com/token", "reg.example.com", true).unwrap();
        assert!(plain.contains("plain HTTP"), "{plain}");
        assert!(realm_refusal("http://127.0.0.1:5000/token", "127.0.0.1:5000", false).is_some());
        assert_eq!(realm_refusal("http://127.0.0.1:9/token", "127.0.0.1:5000", true), None);
        assert!(realm_refusal("http://localhost:5000/token", "127.0.0.1:5000", true).is_some());
        assert!(realm_refusal("not a url", "reg.example.com", false).is_some());
        assert_eq!(realm_refusal("https://[::1]/t", "[::1]:5000", false), None);
    }

    #[test]
    fn bearer_challenges_name_their_realm() {
        let h = r#"Bearer realm="https://auth.example/token",service="registry",scope="repository:a:pull""#;
        assert_eq!(bearer_realm(h).as_deref(), Some("https://auth.example/token"));
        assert_eq!(bearer_realm(r#"bearer Realm=https://a/t,service=x"#).as_deref(), Some("https://a/t"));
        assert_eq!(bearer_realm(r#"Basic realm="Registry""#), None);
    }
}
