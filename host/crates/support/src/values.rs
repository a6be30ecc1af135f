//! The value types of the config file, with their parsers: sizes (`"64MiB"`), durations
//! (`"10s"`), paths with `~/` and `${VAR}`, and the error a value or key gets, which names the
//! key. Used by the config and by every capability's grant parsing.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer};

/// A bad value under a key: what is wrong and the accepted form. The key is relative to
/// wherever the value was found; [`KeyError::under`] prefixes it as the error goes up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError {
    /// Dotted key, e.g. `timeout` or `tools.echo.grants.bedrock.timeout`.
    pub key: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl KeyError {
    /// An error under `key`.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        KeyError { key: key.into(), message: message.into() }
    }

    /// The same error under `prefix` (`prefix.key`, or `prefix` alone for an empty key;
    /// `prefix[i]`-style keys are joined without a dot).
    pub fn under(mut self, prefix: &str) -> Self {
        self.key = if self.key.is_empty() {
            prefix.to_string()
        } else if self.key.starts_with('[') {
            format!("{prefix}{}", self.key)
        } else {
            format!("{prefix}.{}", self.key)
        };
        self
    }
}

/// Whether `name` may name an instance or a section: lowercase letters, digits, `_` and `-`,
/// at most 64 (it becomes part of tool names and guest paths).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// A byte size written as `"64MiB"`, `"1GiB"`, `"512KiB"`, `"100MB"` or a plain integer of bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// Parses a size (the `bytesize` crate's forms: SI and binary units, any case), or says
    /// what form is accepted.
    pub fn parse(s: &str) -> Result<Self, String> {
        let bad =
            || format!("invalid size {s:?}: write a whole number and a unit, like \"64MiB\", \"1GiB\" or \"512KiB\"");
        // The crate saturates where a size overflows: u64::MAX bytes is no size anyone means.
        match s.trim().parse::<bytesize::ByteSize>() {
            Ok(b) if b.as_u64() == u64::MAX => Err(format!("size {s:?} is too large")),
            Ok(b) => Ok(ByteSize(b.as_u64())),
            Err(_) => Err(bad()),
        }
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as \"64MiB\" or a number of bytes")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v).map(ByteSize).map_err(|_| E::custom("a size cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                ByteSize::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A duration written as `"500ms"`, `"10s"`, `"2m"` or `"1h"`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    /// Parses a duration (the `humantime` crate's forms: `"250ms"`, `"10s"`, `"2m"`, `"1h 30m"`),
    /// or says what form is accepted.
    pub fn parse(s: &str) -> Result<Self, String> {
        let d = humantime::parse_duration(s.trim()).map_err(|_| {
            format!("invalid duration {s:?}: write a whole number and a unit, like \"500ms\", \"10s\" or \"2m\"")
        })?;
        if d.is_zero() {
            return Err(format!("duration {s:?} must be greater than zero"));
        }
        Ok(HumanDuration(d))
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        HumanDuration::parse(&s).map_err(de::Error::custom)
    }
}

/// [`expand`] on a path; a path that is not UTF-8 is taken as it is.
pub fn expand_path(path: &Path) -> Result<PathBuf, String> {
    match path.to_str() {
        Some(s) => expand(s).map(PathBuf::from),
        None => Ok(path.to_path_buf()),
    }
}

/// Expands a path from the config: a leading `~/` is `$HOME/`, `${NAME}` is the host's
/// environment variable NAME (an error when unset or empty), `${NAME:-default}` falls back to
/// `default` (itself expanded). Lets one config name per-user places (models, caches, build
/// output) without hard-coding them. Grants are unchanged by it: the guest still sees only
/// what the expanded path names.
pub fn expand(path: &str) -> Result<String, String> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let mut out = String::new();
    let mut rest = path;
    if let Some(tail) = rest.strip_prefix("~/") {
        out.push_str(&var("HOME").ok_or("`~` needs $HOME, which is not set")?);
        out.push('/');
        rest = tail;
    }
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| format!("unclosed `${{` in {path:?}"))?;
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("bad variable name {name:?} in {path:?}"));
        }
        match (var(name), default) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(&expand(d)?),
            (None, None) => {
                return Err(format!(
                    "{path:?} uses ${{{name}}}, which is not set; set it or write ${{{name}:-default}}"
                ));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_expand_home_variables_and_defaults() {
        // HOME and PATH are set in any test run; the odd name is not.
        let home = std::env::var("HOME").unwrap();
        assert_eq!(expand("~/x").unwrap(), format!("{home}/x"));
        assert_eq!(expand("a/${HOME}/b").unwrap(), format!("a/{home}/b"));
        assert_eq!(expand("${QUARRY_TEST_UNSET_VAR_42:-~/m}").unwrap(), format!("{home}/m"));
        assert_eq!(expand("${QUARRY_TEST_UNSET_VAR_42:-rel/dir}/f").unwrap(), "rel/dir/f");
        assert_eq!(expand("plain/path").unwrap(), "plain/path");
        assert!(expand("${QUARRY_TEST_UNSET_VAR_42}").unwrap_err().contains("not set"));
        assert!(expand("${HOME").unwrap_err().contains("unclosed"));
        assert!(expand("${BAD-NAME}").unwrap_err().contains("bad variable name"));
    }

    #[test]
    fn sizes_and_durations() {
        assert_eq!(ByteSize::parse("64MiB").unwrap().0, 64 << 20);
        assert_eq!(ByteSize::parse("1 GiB").unwrap().0, 1 << 30);
        assert_eq!(ByteSize::parse("100MB").unwrap().0, 100_000_000);
        assert!(ByteSize::parse("64 parsecs").unwrap_err().contains("64MiB"));
        assert!(ByteSize::parse("-1MiB").is_err());
        assert_eq!(HumanDuration::parse("250ms").unwrap().0, Duration::from_millis(250));
        assert_eq!(HumanDuration::parse("2m").unwrap().0, Duration::from_secs(120));
        assert!(HumanDuration::parse("10").unwrap_err().contains("10s"));
        assert!(HumanDuration::parse("0s").is_err());
        assert!(ByteSize::parse("99999999999EiB").unwrap_err().contains("too large"));
        assert_eq!(HumanDuration::parse("1h 30m").unwrap().0, Duration::from_secs(5400));
    }
}
