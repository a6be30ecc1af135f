//! `grants.bedrock`: which knowledge bases an instance may query, and how the host reaches
//! Bedrock for it.

use std::time::Duration;

use serde::Deserialize;

use quarry_support::limits::within_deadline;
use quarry_support::values::{HumanDuration, KeyError};

/// `grants.bedrock` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGrant {
    knowledge_bases: Vec<String>,
    region: Option<String>,
    endpoint: Option<String>,
    profile: Option<String>,
    max_attempts: Option<u32>,
    attempt_timeout: Option<HumanDuration>,
    timeout: Option<HumanDuration>,
    connect_timeout: Option<HumanDuration>,
}

/// What an instance may do with Bedrock (`[tools.NAME.grants.bedrock]`).
#[derive(Debug, Clone, PartialEq)]
pub struct BedrockGrant {
    /// Knowledge-base ids the instance may query; `*` allows any.
    pub knowledge_bases: Vec<String>,
    /// The region; when unset, the environment's (see the module docs).
    pub region: Option<String>,
    /// An endpoint instead of the region's (tests, VPC endpoints).
    pub endpoint: Option<String>,
    /// The AWS profile to take credentials and settings from.
    pub profile: Option<String>,
    /// Attempts per call, the first included.
    pub max_attempts: u32,
    /// Limit on one attempt.
    pub attempt_timeout: Duration,
    /// Limit on a whole call, retries included.
    pub timeout: Duration,
    /// Limit on opening a connection.
    pub connect_timeout: Duration,
}

impl Default for BedrockGrant {
    fn default() -> Self {
        BedrockGrant {
            knowledge_bases: Vec::new(),
            region: None,
            endpoint: None,
            profile: None,
            max_attempts: 3,
            attempt_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(3),
        }
    }
}

impl BedrockGrant {
    /// Whether `kb` is granted: `*` grants everything; an id grants that id; an ARN grants that
    /// ARN, and an ARN pattern (`*` for a whole field: region, account or id) grants the ARNs it
    /// matches. An id never grants an ARN (it could name another account's or region's
    /// knowledge base), nor an ARN an id.
    pub fn allows(&self, kb: &str) -> bool {
        let Ok(asked) = KbIdentifier::parse(kb) else { return false };
        self.knowledge_bases.iter().any(|k| k == "*" || KbIdentifier::parse(k).is_ok_and(|g| g.grants(&asked)))
    }
}

/// A knowledge base as the API names it (`KnowledgeBaseIdentifier`): a 10-character id, or
/// `arn:aws[-x]:bedrock:REGION:ACCOUNT:knowledge-base/ID`. In a grant, an ARN's region, account
/// and id may each be `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KbIdentifier {
    /// A bare id.
    Id(String),
    /// An ARN's fields.
    Arn {
        /// `aws`, `aws-cn`, `aws-us-gov`, …
        partition: String,
        /// The region, or `*`.
        region: String,
        /// The 12-digit account, or `*`.
        account: String,
        /// The id, or `*`.
        id: String,
    },
}

impl KbIdentifier {
    /// Parses an id or an ARN by the API model's pattern, accepting `*` fields (for grants; a
    /// request naming `*` matches no knowledge base the service has, and is refused there).
    pub fn parse(s: &str) -> Result<KbIdentifier, String> {
        let id_ok = |id: &str| id == "*" || (id.len() == 10 && id.bytes().all(|b| b.is_ascii_alphanumeric()));
        let bad = || {
            format!(
                "{} is not a knowledge-base id (10 letters and digits) or ARN (arn:aws:bedrock:REGION:ACCOUNT:knowledge-base/ID)",
                quarry_support::text::quoted_prefix(s, 64)
            )
        };
        if !s.starts_with("arn:") {
            return if s != "*" && id_ok(s) { Ok(KbIdentifier::Id(s.to_string())) } else { Err(bad()) };
        }
        let parts: Vec<&str> = s.splitn(6, ':').collect();
        let [_, partition, "bedrock", region, account, resource] = parts[..] else { return Err(bad()) };
        let id = resource.strip_prefix("knowledge-base/").ok_or_else(bad)?;
        let partition_ok = partition == "aws"
            || partition
                .strip_prefix("aws-")
                .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
        let region_ok = region == "*"
            || ((1..=20).contains(&region.len())
                && region.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
        let account_ok = account == "*" || (account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit()));
        if !(partition_ok && region_ok && account_ok && id_ok(id)) {
            return Err(bad());
        }
        Ok(KbIdentifier::Arn {
            partition: partition.to_string(),
            region: region.to_string(),
            account: account.to_string(),
            id: id.to_string(),
        })
    }

    /// Whether a field is `*`: a grant pattern, not a knowledge base.
    pub fn is_pattern(&self) -> bool {
        match self {
            KbIdentifier::Id(_) => false,
            KbIdentifier::Arn { region, account, id, .. } => [region, account, id].iter().any(|f| *f == "*"),
        }
    }

    /// Whether this grant entry covers `asked`.
    fn grants(&self, asked: &KbIdentifier) -> bool {
        let field = |granted: &str, asked: &str| granted == "*" || granted == asked;
        match (self, asked) {
            (KbIdentifier::Id(g), KbIdentifier::Id(a)) => g == a,
            (
                KbIdentifier::Arn { partition: gp, region: gr, account: ga, id: gi },
                KbIdentifier::Arn { partition: ap, region: ar, account: aa, id: ai },
            ) => gp == ap && field(gr, ar) && field(ga, aa) && field(gi, ai),
            _ => false,
        }
    }
}

/// Validates `grants.bedrock`. A Bedrock call must end inside the instance's `deadline` (see
/// [`quarry_support::limits::deadline_room`]): the whole-call timeout defaults to 30 s or the deadline
/// less a second, whichever is shorter, and may not be set longer.
pub fn grant(raw: RawGrant, deadline: Duration) -> Result<BedrockGrant, KeyError> {
    let mut g = BedrockGrant::default();
    if raw.knowledge_bases.is_empty() {
        return Err(KeyError::new(
            "knowledge_bases",
            "list the knowledge-base ids this instance may query (or \"*\" for any)",
        ));
    }
    for kb in &raw.knowledge_bases {
        if kb != "*" {
            KbIdentifier::parse(kb).map_err(|m| {
                KeyError::new("knowledge_bases", format!("{m}, an ARN pattern with `*` fields, or \"*\" for any"))
            })?;
        }
    }
    g.knowledge_bases = raw.knowledge_bases;
    g.region = raw.region.filter(|r| !r.trim().is_empty());
    if let Some(e) = raw.endpoint {
        let ok = e
            .parse::<http::Uri>()
            .is_ok_and(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some());
        if !ok {
            return Err(KeyError::new(
                "endpoint",
                format!("{e:?} is not an http(s) URL, like \"https://bedrock-agent-runtime.us-east-1.amazonaws.com\""),
            ));
        }
        g.endpoint = Some(e);
    }
    g.profile = raw.profile;
    if let Some(n) = raw.max_attempts {
        if !(1..=10).contains(&n) {
            return Err(KeyError::new("max_attempts", format!("{n} is out of range: between 1 and 10 attempts")));
        }
        g.max_attempts = n;
    }
    g.timeout = within_deadline(raw.timeout, g.timeout, deadline, "timeout")?;
    g.attempt_timeout =
        within_deadline(raw.attempt_timeout, g.attempt_timeout.min(g.timeout), deadline, "attempt_timeout")?;
    g.connect_timeout = within_deadline(raw.connect_timeout, g.connect_timeout, deadline, "connect_timeout")?;
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, deadline_secs: u64) -> Result<BedrockGrant, KeyError> {
        grant(toml::from_str(text).unwrap(), Duration::from_secs(deadline_secs))
    }

    #[test]
    fn grant_keys_are_checked_and_timeouts_fit_the_deadline() {
        let g = parse(r#"knowledge_bases = ["ABCDEFGHIJ"]"#, 10).unwrap();
        // The whole-call timeout defaults to 30 s, cut to the deadline less a second.
        assert_eq!(g.timeout, Duration::from_secs(9));
        assert!(g.attempt_timeout <= g.timeout);
        let g = parse(
            r#"knowledge_bases = ["*"]
region = "eu-west-1"
endpoint = "http://127.0.0.1:9"
max_attempts = 2
timeout = "5s""#,
            60,
        )
        .unwrap();
        assert_eq!(
            (g.region.as_deref(), g.endpoint.as_deref(), g.max_attempts),
            (Some("eu-west-1"), Some("http://127.0.0.1:9"), 2)
        );
        assert_eq!(g.timeout, Duration::from_secs(5));
        for (text, key, says) in [
            ("knowledge_bases = []", "knowledge_bases", "list the knowledge-base ids"),
            (r#"knowledge_bases = ["kb 1"]"#, "knowledge_bases", "ARN pattern"),
            ("knowledge_bases = [\"*\"]\nendpoint = \"ftp://x\"", "endpoint", "not an http(s) URL"),
            ("knowledge_bases = [\"*\"]\nmax_attempts = 0", "max_attempts", "between 1 and 10"),
            ("knowledge_bases = [\"*\"]\ntimeout = \"2m\"", "timeout", "deadline"),
            ("knowledge_bases = [\"*\"]\nconnect_timeout = \"2m\"", "connect_timeout", "deadline"),
        ] {
            let e = parse(text, 60).unwrap_err();
            assert!(e.key == key && e.message.contains(says), "{text}: {e:?}");
        }
        assert!(toml::from_str::<RawGrant>("knowledge_bases = []\nregoin = \"x\"").is_err());
    }

    #[test]
    fn grant_matches_ids_and_arns() {
        let g = BedrockGrant { knowledge_bases: vec!["ABCDEFGHIJ".into()], ..Default::default() };
        assert!(g.allows("ABCDEFGHIJ"));
        // An id grants no ARN: the ARN may name another account's or region's knowledge base.
        assert!(!g.allows("arn:aws:bedrock:us-east-1:123456789012:knowledge-base/ABCDEFGHIJ"));
        assert!(!g.allows("arn:aws:bedrock:eu-west-1:999999999999:knowledge-base/ABCDEFGHIJ"));
        assert!(!g.allows("ABCDEFGHIK"));
        let mine = "arn:aws:bedrock:us-east-1:123456789012:knowledge-base/ABCDEFGHIJ";
        let g = BedrockGrant { knowledge_bases: vec![mine.into()], ..Default::default() };
        assert!(g.allows(mine));
        for other in [
            "arn:aws:bedrock:us-east-1:999999999999:knowledge-base/ABCDEFGHIJ",
            "arn:aws:bedrock:eu-west-1:123456789012:knowledge-base/ABCDEFGHIJ",
            "arn:aws-cn:bedrock:us-east-1:123456789012:knowledge-base/ABCDEFGHIJ",
            "arn:aws:bedrock:us-east-1:123456789012:knowledge-base/ABCDEFGHIJ/x",
            "xarn:aws:bedrock:us-east-1:999999999999:knowledge-base/ABCDEFGHIJ",
            "ABCDEFGHIJ",
        ] {
            assert!(!g.allows(other), "{other}");
        }
        let pattern = "arn:aws:bedrock:us-east-1:123456789012:knowledge-base/*";
        let g = BedrockGrant { knowledge_bases: vec![pattern.into()], ..Default::default() };
        assert!(g.allows("arn:aws:bedrock:us-east-1:123456789012:knowledge-base/KB00000001"));
        assert!(!g.allows("arn:aws:bedrock:us-east-1:999999999999:knowledge-base/KB00000001"));
        assert!(!g.allows("KB00000001"));
        for bad in ["../x", "ABCDEFGHIJ?x", "arn:aws:bedrock:us-east-1:123:knowledge-base/ABCDEFGHIJ", ""] {
            assert!(KbIdentifier::parse(bad).is_err(), "{bad}");
        }
        assert!(!BedrockGrant::default().allows("ABCDEFGHIJ"));
        assert!(BedrockGrant { knowledge_bases: vec!["*".into()], ..Default::default() }.allows("ANYTHING12"));
    }
}
