//! The instance config: CrewAI's constructor arguments, less the two objects the host supplies
//! (the cluster is the instance's `grants.couchbase` connection, the embedding function is the
//! host-linked embedder).

use serde_json::{Map, Value};

/// A validated config.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The bucket to search.
    pub bucket_name: String,
    /// The scope within the bucket.
    pub scope_name: String,
    /// The collection within the scope.
    pub collection_name: String,
    /// The search (vector) index.
    pub index_name: String,
    /// The index field that holds the vectors (CrewAI's default `embedding`).
    pub embedding_key: String,
    /// A scoped index (true, CrewAI's default) or a cluster-level one.
    pub scoped_index: bool,
    /// Rows to return, also the vector search's candidates (CrewAI's default 3).
    pub limit: u32,
}

/// The keys a config may have.
pub const KEYS: [&str; 7] =
    ["bucket_name", "scope_name", "collection_name", "index_name", "embedding_key", "scoped_index", "limit"];

/// The largest `limit` accepted: more rows than an LLM can use.
pub const MAX_LIMIT: u64 = 1000;

impl Config {
    /// Parses and checks `json`; each message names the key and what to write.
    pub fn parse(json: &str) -> Result<Config, String> {
        let v: Value = serde_json::from_str(json).map_err(|e| format!("the config is not JSON: {e}"))?;
        let Value::Object(o) = v else { return Err("the config must be an object".into()) };
        if let Some(k) = o.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(format!("unknown config key `{k}`; the keys are: {}", KEYS.join(", ")));
        }
        let required = |key: &str, what: &str| -> Result<String, String> {
            match o.get(key) {
                None | Some(Value::Null) => Err(format!("{key} is required: the name of the {what}")),
                Some(Value::String(s)) if s.trim().is_empty() => Err(format!("{key} cannot be empty")),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(_) => Err(format!("{key} must be a string")),
            }
        };
        Ok(Config {
            bucket_name: required("bucket_name", "Couchbase bucket to search")?,
            scope_name: required("scope_name", "scope within the bucket")?,
            collection_name: required("collection_name", "collection within the scope")?,
            index_name: required("index_name", "search (vector) index")?,
            embedding_key: optional_string(&o, "embedding_key")?.unwrap_or_else(|| "embedding".into()),
            scoped_index: match o.get("scoped_index") {
                None | Some(Value::Null) => true,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err("scoped_index must be true or false".into()),
            },
            limit: match o.get("limit") {
                None | Some(Value::Null) => 3,
                Some(v) => match v.as_u64() {
                    Some(n) if (1..=MAX_LIMIT).contains(&n) => n as u32,
                    _ => return Err(format!("limit must be a whole number from 1 to {MAX_LIMIT}")),
                },
            },
        })
    }
}

fn optional_string(o: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Err(format!("{key} cannot be empty")),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("{key} must be a string")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"{"bucket_name":"b","scope_name":"s","collection_name":"c","index_name":"i"}"#;

    #[test]
    fn defaults_are_crewais() {
        let c = Config::parse(FULL).unwrap();
        assert_eq!((c.embedding_key.as_str(), c.scoped_index, c.limit), ("embedding", true, 3));
    }

    #[test]
    fn each_missing_required_key_is_named() {
        for key in ["bucket_name", "scope_name", "collection_name", "index_name"] {
            let mut v: Value = serde_json::from_str(FULL).unwrap();
            v.as_object_mut().unwrap().remove(key);
            let e = Config::parse(&v.to_string()).unwrap_err();
            assert!(e.starts_with(&format!("{key} is required")), "{e}");
        }
    }

    #[test]
    fn bad_values() {
        let with = |extra: &str| Config::parse(&FULL.replace('}', &format!(",{extra}}}")));
        assert!(with(r#""limit":0"#).unwrap_err().contains("limit must be"));
        assert!(with(r#""limit":2.5"#).unwrap_err().contains("limit must be"));
        assert!(with(r#""scoped_index":"no""#).unwrap_err().contains("true or false"));
        assert!(with(r#""embedding_key":"""#).unwrap_err().contains("cannot be empty"));
        assert!(with(r#""cluster":"x""#).unwrap_err().contains("unknown config key `cluster`"));
        assert_eq!(with(r#""limit":7,"scoped_index":false"#).unwrap().limit, 7);
        assert!(Config::parse("[]").unwrap_err().contains("object"));
    }
}
