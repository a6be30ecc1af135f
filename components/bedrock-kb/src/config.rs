//! The instance config, validated at open with CrewAI's rules and wording
//! (`Parameter validation failed: …`), plus Quarry's additions: a knowledge-base ARN is
//! accepted wherever the API accepts one.

use serde_json::{Map, Value, json};

/// A validated config.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The knowledge base: a 10-character id, or its ARN.
    pub knowledge_base_id: String,
    /// Results per call; `None` when the config set it to null.
    pub number_of_results: Option<i64>,
    /// `retrievalConfiguration`, as given or built from `number_of_results`.
    pub retrieval_configuration: Value,
    /// `guardrailConfiguration`, passed as is.
    pub guardrail_configuration: Option<Value>,
    /// A paging token for the first call.
    pub next_token: Option<String>,
}

const KNOWN: &[&str] =
    &["knowledge_base_id", "number_of_results", "retrieval_configuration", "guardrail_configuration", "next_token"];

fn failed(m: impl std::fmt::Display) -> String {
    format!("Parameter validation failed: {m}")
}

/// Whether `s` is a knowledge-base ARN (`arn:aws[-x]:bedrock:REGION:ACCOUNT:knowledge-base/ID`).
pub fn is_arn(s: &str) -> bool {
    let p: Vec<&str> = s.splitn(6, ':').collect();
    p.len() == 6
        && p[0] == "arn"
        && p[1].starts_with("aws")
        && p[2] == "bedrock"
        && !p[3].is_empty()
        && p[4].len() == 12
        && p[4].bytes().all(|b| b.is_ascii_digit())
        && p[5]
            .strip_prefix("knowledge-base/")
            .is_some_and(|id| id.len() == 10 && id.bytes().all(|b| b.is_ascii_alphanumeric()))
}

/// The rules on a paging token, shared by the config and per-call `next_token`.
pub fn check_next_token(t: &str) -> Result<(), String> {
    if t.is_empty() || t.chars().count() > 2048 {
        return Err(failed("next_token must be between 1 and 2048 characters"));
    }
    if t.contains(' ') {
        return Err(failed("next_token cannot contain spaces"));
    }
    Ok(())
}

/// The rules on `number_of_results`, shared by the config and per-call arguments.
pub fn check_number_of_results(v: &Value) -> Result<i64, String> {
    let n = v.as_i64().filter(|_| !v.is_f64()).ok_or_else(not_an_integer)?;
    check_count(n)
}

/// `number_of_results` given as something other than an integer.
pub fn not_an_integer() -> String {
    failed("number_of_results must be an integer")
}

/// The rule on an integer `number_of_results`.
pub fn check_count(n: i64) -> Result<i64, String> {
    if n < 1 {
        return Err(failed("number_of_results must be greater than 0"));
    }
    Ok(n)
}

/// Validates `config` (a JSON object); `env_kb` is `BEDROCK_KB_ID` from the host's environment.
pub fn parse(config: &str, env_kb: Option<String>) -> Result<Config, String> {
    let v: Value = serde_json::from_str(config).map_err(|e| format!("config is not JSON: {e}"))?;
    let o: &Map<String, Value> = v.as_object().ok_or("config must be a table of settings")?;
    if let Some(k) = o.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(format!("unknown config key `{k}`; known keys: {}", KNOWN.join(", ")));
    }
    let kb = match o.get("knowledge_base_id") {
        None | Some(Value::Null) => env_kb.map(Value::String),
        Some(v) => Some(v.clone()),
    };
    let kb = match kb {
        None => return Err(failed("knowledge_base_id cannot be empty")),
        Some(Value::String(s)) if s.is_empty() => return Err(failed("knowledge_base_id cannot be empty")),
        Some(Value::String(s)) => s,
        Some(_) => return Err(failed("knowledge_base_id must be a string")),
    };
    if !is_arn(&kb) {
        if kb.chars().count() > 10 {
            return Err(failed("knowledge_base_id must be 10 characters or less"));
        }
        if !kb.chars().all(char::is_alphanumeric) {
            return Err(failed("knowledge_base_id must contain only alphanumeric characters"));
        }
    }
    let next_token = match o.get("next_token") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => {
            check_next_token(s)?;
            Some(s.clone())
        }
        Some(_) => return Err(failed("next_token must be a string")),
    };
    let number_of_results = match o.get("number_of_results") {
        None => Some(5),
        Some(Value::Null) => None,
        Some(v) => Some(check_number_of_results(v)?),
    };
    let retrieval_configuration = match o.get("retrieval_configuration") {
        None | Some(Value::Null) => {
            let mut vs = Map::new();
            if let Some(n) = number_of_results {
                vs.insert("numberOfResults".into(), json!(n));
            }
            json!({ "vectorSearchConfiguration": vs })
        }
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => return Err(
            "`retrieval_configuration` must be a table, like { vectorSearchConfiguration = { numberOfResults = 5 } }"
                .into(),
        ),
    };
    let guardrail_configuration =
        match o.get("guardrail_configuration") {
            None | Some(Value::Null) => None,
            Some(v @ Value::Object(_)) => Some(v.clone()),
            Some(_) => return Err(
                "`guardrail_configuration` must be a table, like { guardrailId = \"...\", guardrailVersion = \"1\" }"
                    .into(),
            ),
        };
    Ok(Config {
        knowledge_base_id: kb,
        number_of_results,
        retrieval_configuration,
        guardrail_configuration,
        next_token,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(config: &str) -> String {
        parse(config, None).unwrap_err()
    }

    #[test]
    fn crewai_rules_and_messages() {
        assert_eq!(err("{}"), "Parameter validation failed: knowledge_base_id cannot be empty");
        assert_eq!(
            err(r#"{"knowledge_base_id": ""}"#),
            "Parameter validation failed: knowledge_base_id cannot be empty"
        );
        assert_eq!(
            err(r#"{"knowledge_base_id": 5}"#),
            "Parameter validation failed: knowledge_base_id must be a string"
        );
        assert_eq!(
            err(r#"{"knowledge_base_id": "ABCDEFGHIJK"}"#),
            "Parameter validation failed: knowledge_base_id must be 10 characters or less"
        );
        assert_eq!(
            err(r#"{"knowledge_base_id": "ABC-EFGHIJ"}"#),
            "Parameter validation failed: knowledge_base_id must contain only alphanumeric characters"
        );
        let long = "x".repeat(2049);
        assert_eq!(
            err(&format!(r#"{{"knowledge_base_id": "KB", "next_token": "{long}"}}"#)),
            "Parameter validation failed: next_token must be between 1 and 2048 characters"
        );
        assert_eq!(
            err(r#"{"knowledge_base_id": "KB", "next_token": "a b"}"#),
            "Parameter validation failed: next_token cannot contain spaces"
        );
        assert_eq!(
            err(r#"{"knowledge_base_id": "KB", "number_of_results": 2.5}"#),
            "Parameter validation failed: number_of_results must be an integer"
        );
        assert_eq!(
            err(r#"{"knowledge_base_id": "KB", "number_of_results": 0}"#),
            "Parameter validation failed: number_of_results must be greater than 0"
        );
    }

    #[test]
    fn env_fallback_defaults_and_arns() {
        let c = parse("{}", Some("ENVKB00001".into())).unwrap();
        assert_eq!(c.knowledge_base_id, "ENVKB00001");
        assert_eq!(c.retrieval_configuration, json!({"vectorSearchConfiguration": {"numberOfResults": 5}}));
        let c = parse(r#"{"knowledge_base_id": "KBCONFIG01"}"#, Some("ENVKB00001".into())).unwrap();
        assert_eq!(c.knowledge_base_id, "KBCONFIG01", "the config wins over the environment");
        let given = json!({"vectorSearchConfiguration": {"numberOfResults": 3, "overrideSearchType": "HYBRID"}});
        let c =
            parse(&json!({"knowledge_base_id": "KB1", "retrieval_configuration": given}).to_string(), None).unwrap();
        assert_eq!(c.retrieval_configuration, given, "used as is");
        let arn = "arn:aws:bedrock:us-east-1:123456789012:knowledge-base/ABCDEFGHIJ";
        assert_eq!(parse(&json!({"knowledge_base_id": arn}).to_string(), None).unwrap().knowledge_base_id, arn);
        assert!(err(r#"{"knowledge_base_id": "KB1", "typo": 1}"#).contains("unknown config key `typo`"));
    }
}
