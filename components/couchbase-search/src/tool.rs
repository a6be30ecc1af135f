//! The tool: one instance per configured index, one tool, `search`.
//!
//! `open` makes CrewAI's fail-fast checks in CrewAI's order and with its messages (bucket,
//! scope, collection, index), then one CrewAI never makes: that the index's vector field for
//! `embedding_key` has the embedder's dimension (the most common mistake, which otherwise shows
//! only as a failed or empty search). `call` embeds the query, runs a vector search with
//! CrewAI's `k = size = limit` and `fields = ["*"]`, and prints the rows' fields as CrewAI does.

use rag_core::pyjson::{self, Ordered};
use serde::Deserialize;
use serde_json::json;
use tool_guest::args::{self, ArgsError, JsonSchema, Spec};
pub use tool_guest::tool::{Model, ToolError};

use crate::config::Config;

/// The tool's name.
pub const NAME: &str = "search";

/// CrewAI's description of the tool.
pub const DESCRIPTION: &str = "A tool to search the Couchbase database for relevant information on internal documents.";

/// A call's arguments: the type the spec's schema is derived from and the call parses into
/// (`parse_args`); blank values are checked after the parse, in CrewAI's words.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// The query to search retrieve relevant information from the Couchbase database. Pass only the query, not the question.
    #[schemars(required)]
    query: Option<String>,
    /// Optional. Only documents matching this Couchbase Search query string are ranked, e.g. `+city:paris stars:>=4`.
    prefilter: Option<String>,
}

/// How the host's `couchbase` capability failed (see the WIT `couchbase-error`).
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// No answer: down, wrong credentials, or too slow.
    Unavailable(String),
    /// The bucket or index does not exist.
    NotFound(String),
    /// Outside the instance's grant.
    Denied(String),
    /// Refused before sending.
    InvalidRequest(String),
    /// The cluster answered with an error.
    Service(String),
}

impl Failure {
    /// The host's message.
    pub fn message(&self) -> &str {
        match self {
            Failure::Unavailable(m)
            | Failure::NotFound(m)
            | Failure::Denied(m)
            | Failure::InvalidRequest(m)
            | Failure::Service(m) => m,
        }
    }
}

/// Where an index lives.
#[derive(Debug, Clone, PartialEq)]
pub enum IndexAt {
    /// A scoped index: bucket and scope.
    Scoped(String, String),
    /// A cluster-level index.
    Cluster,
}

/// A vector field of an index.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorField {
    /// Its query path.
    pub path: String,
    /// Its dimension.
    pub dims: u32,
    /// `dot_product`, `cosine` or `l2_norm`.
    pub similarity: String,
}

/// A search index as the host describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexInfo {
    /// The name, without a `bucket.scope.` prefix.
    pub name: String,
    /// Its vector fields.
    pub vector_fields: Vec<VectorField>,
}

/// A vector search request.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// Where the index lives.
    pub at: IndexAt,
    /// The index.
    pub index: String,
    /// The vector field.
    pub field: String,
    /// The query vector.
    pub vector: Vec<f32>,
    /// Candidates (knn `k`).
    pub k: u32,
    /// Rows (`size`).
    pub limit: u32,
    /// Stored fields to return.
    pub fields: Vec<String>,
    /// A query-string prefilter.
    pub prefilter: Option<String>,
}

/// One result row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The document id.
    pub id: String,
    /// The server's score.
    pub score: f64,
    /// The stored fields, JSON, in the server's key order.
    pub fields: Option<String>,
}

/// What the tool needs from the world: the host-linked embedder and the host's Couchbase.
pub trait Env {
    /// The embedder's model.
    fn model(&self) -> Model;
    /// The query's vector.
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, ToolError>;
    /// Whether the bucket exists.
    fn bucket_exists(&self, bucket: &str) -> Result<bool, Failure>;
    /// The bucket's scopes and their collections.
    fn scopes(&self, bucket: &str) -> Result<Vec<(String, Vec<String>)>, Failure>;
    /// The search indexes at `at`.
    fn search_indexes(&self, at: &IndexAt) -> Result<Vec<IndexInfo>, Failure>;
    /// A vector search.
    fn search(&self, query: &Query) -> Result<Vec<Row>, Failure>;
}

/// A call's result: CrewAI's text (the rows' fields, `json.dumps(indent=2)`); one hit per row
/// (its fields as text, a normalised score for cosine and dot-product indexes,
/// `bucket.scope.collection/id` as its source, `{id, score, fields}` with the server's own
/// score); extra `{index, scoped_index, embedding_key, prefilter}`.
pub use tool_guest::tool::{Hit, Output};

/// A configured, checked instance.
#[derive(Debug)]
pub struct Tool {
    config: Config,
    field: VectorField,
    model: Model,
}

/// CrewAI's message for anything that stops the connection.
pub const CONNECT_ERROR: &str = "Error connecting to couchbase. Please check the connection and credentials";

/// A failure during `open`: the host's reason after CrewAI's connection message, or as it is
/// for a refused grant.
fn open_failure(f: Failure) -> ToolError {
    match f {
        Failure::Denied(m) => ToolError::Denied(m),
        Failure::InvalidRequest(m) => ToolError::InvalidConfig(m),
        f => ToolError::Upstream(format!("{CONNECT_ERROR}: {}", f.message())),
    }
}

impl Tool {
    /// Parses the config and makes the fail-fast checks.
    pub fn open(json: &str, env: &dyn Env) -> Result<Tool, ToolError> {
        let config = Config::parse(json).map_err(ToolError::InvalidConfig)?;
        let (b, s, c, i) = (&config.bucket_name, &config.scope_name, &config.collection_name, &config.index_name);
        if !env.bucket_exists(b).map_err(open_failure)? {
            return Err(ToolError::NotFound(format!(
                "Bucket {b} does not exist.  Please create the bucket before searching."
            )));
        }
        let scopes = env.scopes(b).map_err(open_failure)?;
        let Some((_, collections)) = scopes.iter().find(|(name, _)| name == s) else {
            return Err(ToolError::NotFound(format!("Scope {s} not found in Couchbase bucket {b}")));
        };
        if !collections.iter().any(|name| name == c) {
            return Err(ToolError::NotFound(format!("Collection {c} not found in scope {s} in Couchbase bucket {b}")));
        }
        let at = if config.scoped_index { IndexAt::Scoped(b.clone(), s.clone()) } else { IndexAt::Cluster };
        let indexes = env.search_indexes(&at).map_err(open_failure)?;
        let Some(index) = indexes.iter().find(|x| x.name == *i) else {
            return Err(ToolError::NotFound(format!(
                "Index {i} does not exist.  Please create the index before searching."
            )));
        };
        let model = env.model();
        let key = &config.embedding_key;
        let Some(field) = index.vector_fields.iter().find(|f| f.path == *key).cloned() else {
            let known: Vec<_> = index.vector_fields.iter().map(|f| format!("{} ({} dims)", f.path, f.dims)).collect();
            return Err(ToolError::InvalidConfig(format!(
                "Index {i} has no vector field `{key}` (embedding_key); its vector fields: {}. Set embedding_key to one of them, or add a vector field `{key}` of {} dims to the index",
                if known.is_empty() { "none".to_string() } else { known.join(", ") },
                model.dimension
            )));
        };
        if field.dims as usize != model.dimension {
            return Err(ToolError::InvalidConfig(format!(
                "Index {i} field `{key}` holds {}-dimensional vectors, but the embedder ({}) makes {}-dimensional ones: use the embedder the documents were embedded with, or rebuild the index with dims {}",
                field.dims, model.id, model.dimension, model.dimension
            )));
        }
        Ok(Tool { config, field, model })
    }

    /// The tool's spec: name, description, JSON Schema of the arguments.
    pub fn spec(&self) -> Spec {
        Spec::of::<Args>(NAME, DESCRIPTION)
    }

    /// Runs a search. Failures after the arguments are checked read as CrewAI's
    /// `Search failed with error: …`.
    pub fn call(&self, args: &str, env: &dyn Env) -> Result<Output, ToolError> {
        let (query, prefilter) = parse_args(args)?;
        let failed = |m: &str| format!("Search failed with error: {m}");
        let vector = env.embed_query(&query).map_err(|e| ToolError::Upstream(failed(&e.to_string())))?;
        if vector.len() != self.model.dimension {
            return Err(ToolError::Upstream(failed(&format!(
                "the embedder returned a {}-dimensional vector; the index expects {}",
                vector.len(),
                self.model.dimension
            ))));
        }
        let c = &self.config;
        let q = Query {
            at: if c.scoped_index {
                IndexAt::Scoped(c.bucket_name.clone(), c.scope_name.clone())
            } else {
                IndexAt::Cluster
            },
            index: c.index_name.clone(),
            field: c.embedding_key.clone(),
            vector,
            k: c.limit,
            limit: c.limit,
            fields: vec!["*".to_string()],
            prefilter: prefilter.clone(),
        };
        let rows = env.search(&q).map_err(|f| match f {
            Failure::Denied(m) => ToolError::Denied(failed(&m)),
            f => ToolError::Upstream(failed(f.message())),
        })?;
        self.output(rows, prefilter)
    }

    fn output(&self, rows: Vec<Row>, prefilter: Option<String>) -> Result<Output, ToolError> {
        let c = &self.config;
        let normalised = matches!(self.field.similarity.as_str(), "dot_product" | "cosine");
        let mut printed = Vec::new();
        let mut hits = Vec::new();
        for row in rows {
            // CrewAI prints `row.fields`; a row the server sent without fields prints as {}.
            let fields = match &row.fields {
                Some(f) => pyjson::parse(f).map_err(|e| {
                    ToolError::Upstream(format!(
                        "Search failed with error: the fields of row {} are not JSON: {e}",
                        row.id
                    ))
                })?,
                None => Ordered::Object(Vec::new()),
            };
            hits.push(Hit {
                content: pyjson::dumps(&fields),
                score: normalised.then(|| rag_core::score::from_cosine(row.score as f32)),
                source: Some(format!("{}.{}.{}/{}", c.bucket_name, c.scope_name, c.collection_name, row.id)),
                location: None,
                resource: None,
                metadata: json!({"id": row.id, "score": row.score, "fields": pyjson::to_value(&fields)}),
            });
            printed.push(fields);
        }
        Ok(Output {
            text: pyjson::dumps(&Ordered::Array(printed)),
            hits,
            route: None,
            extra: json!({
                "index": c.index_name,
                "scoped_index": c.scoped_index,
                "embedding_key": c.embedding_key,
                "prefilter": prefilter,
            }),
            content: Vec::new(),
        })
    }
}

/// `{query, prefilter?}`, parsed into [`Args`].
fn parse_args(args: &str) -> Result<(String, Option<String>), ToolError> {
    let a: Args = args::parse_text(args).map_err(|e| {
        ToolError::InvalidArgs(match e {
            ArgsError::NotJson(e) => format!("arguments are not JSON: {e}"),
            ArgsError::NotObject => "arguments must be an object like {\"query\": \"...\"}".into(),
            ArgsError::Unknown { key, names } => {
                format!("unknown argument `{key}`; the arguments are {}", names.join(", "))
            }
            ArgsError::Missing(arg) => format!("{arg} is required"),
            ArgsError::Invalid { arg, .. } if arg == "prefilter" => {
                "prefilter must be a string in the Search query-string syntax, like \"+city:paris\"".into()
            }
            ArgsError::Invalid { arg, expected, .. } => format!("{arg} must be {expected}"),
        })
    })?;
    let query = match a.query {
        Some(s) if !s.trim().is_empty() => s,
        Some(_) => return Err(ToolError::InvalidArgs("query cannot be empty".into())),
        None => return Err(ToolError::InvalidArgs("query is required: the text to search for".into())),
    };
    let prefilter = a.prefilter.filter(|s| !s.trim().is_empty());
    Ok((query, prefilter))
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    /// A cluster in memory: checks arguments, records searches.
    struct Fake {
        buckets: Vec<&'static str>,
        dims: u32,
        fail: Option<Failure>,
        searched: RefCell<Vec<Query>>,
    }

    impl Fake {
        fn new() -> Fake {
            Fake { buckets: vec!["travel"], dims: 4, fail: None, searched: RefCell::new(Vec::new()) }
        }
    }

    impl Env for Fake {
        fn model(&self) -> Model {
            Model { id: "toy".into(), dimension: 4, max_tokens: 128 }
        }
        fn embed_query(&self, _text: &str) -> Result<Vec<f32>, ToolError> {
            Ok(vec![1.0, 0.0, 0.0, 0.0])
        }
        fn bucket_exists(&self, bucket: &str) -> Result<bool, Failure> {
            match &self.fail {
                Some(f @ Failure::Unavailable(_)) => Err(f.clone()),
                _ => Ok(self.buckets.contains(&bucket)),
            }
        }
        fn scopes(&self, _bucket: &str) -> Result<Vec<(String, Vec<String>)>, Failure> {
            Ok(vec![("inventory".into(), vec!["hotels".into()])])
        }
        fn search_indexes(&self, at: &IndexAt) -> Result<Vec<IndexInfo>, Failure> {
            let name = if *at == IndexAt::Cluster { "global-vec" } else { "hotels-vec" };
            Ok(vec![IndexInfo {
                name: name.into(),
                vector_fields: vec![VectorField {
                    path: "embedding".into(),
                    dims: self.dims,
                    similarity: "dot_product".into(),
                }],
            }])
        }
        fn search(&self, query: &Query) -> Result<Vec<Row>, Failure> {
            self.searched.borrow_mut().push(query.clone());
            if let Some(f) = &self.fail {
                return Err(f.clone());
            }
            Ok(vec![
                Row {
                    id: "h1".into(),
                    score: 0.8,
                    fields: Some(r#"{"name":"Hôtel","city":"paris","stars":4}"#.into()),
                },
                Row { id: "h2".into(), score: 0.1, fields: None },
            ])
        }
    }

    fn config(extra: &str) -> String {
        format!(
            r#"{{"bucket_name":"travel","scope_name":"inventory","collection_name":"hotels","index_name":"hotels-vec"{extra}}}"#
        )
    }

    #[test]
    fn open_checks_in_crewais_order_with_its_messages() {
        let env = Fake::new();
        let err = |cfg: String| Tool::open(&cfg, &env).unwrap_err();
        assert_eq!(
            err(config("").replace("travel", "nope")),
            ToolError::NotFound("Bucket nope does not exist.  Please create the bucket before searching.".into())
        );
        assert_eq!(
            err(config("").replace("inventory", "x")),
            ToolError::NotFound("Scope x not found in Couchbase bucket travel".into())
        );
        assert_eq!(
            err(config("").replace("\"hotels\"", "\"y\"")),
            ToolError::NotFound("Collection y not found in scope inventory in Couchbase bucket travel".into())
        );
        assert_eq!(
            err(config("").replace("hotels-vec", "z")),
            ToolError::NotFound("Index z does not exist.  Please create the index before searching.".into())
        );
        // The cluster-level path looks among the cluster's indexes.
        assert!(
            matches!(err(config(r#","scoped_index":false"#)), ToolError::NotFound(m) if m.starts_with("Index hotels-vec"))
        );
        let down = Fake { fail: Some(Failure::Unavailable("no answer within 5s".into())), ..Fake::new() };
        assert_eq!(
            Tool::open(&config(""), &down).unwrap_err(),
            ToolError::Upstream(format!("{CONNECT_ERROR}: no answer within 5s"))
        );
    }

    #[test]
    fn open_checks_the_vector_field_and_its_dimension() {
        let wrong = Fake { dims: 384, ..Fake::new() };
        let e = Tool::open(&config(""), &wrong).unwrap_err();
        assert!(
            matches!(&e, ToolError::InvalidConfig(m) if m.contains("holds 384-dimensional vectors") && m.contains("makes 4-dimensional")),
            "{e:?}"
        );
        let e = Tool::open(&config(r#","embedding_key":"vec""#), &Fake::new()).unwrap_err();
        assert!(
            matches!(&e, ToolError::InvalidConfig(m) if m.contains("no vector field `vec`") && m.contains("embedding (4 dims)")),
            "{e:?}"
        );
    }

    #[test]
    fn search_sends_crewais_query_and_prints_its_text() {
        let env = Fake::new();
        let tool = Tool::open(&config(r#","limit":5"#), &env).unwrap();
        let out = tool.call(r#"{"query":"quiet hotel","prefilter":"+city:paris"}"#, &env).unwrap();
        let q = env.searched.borrow()[0].clone();
        assert_eq!((q.k, q.limit, q.fields.clone()), (5, 5, vec!["*".to_string()]));
        assert_eq!(q.at, IndexAt::Scoped("travel".into(), "inventory".into()));
        assert_eq!(q.prefilter.as_deref(), Some("+city:paris"));
        assert_eq!(
            out.text,
            "[\n  {\n    \"name\": \"H\\u00f4tel\",\n    \"city\": \"paris\",\n    \"stars\": 4\n  },\n  {}\n]"
        );
        assert_eq!(out.hits[0].source.as_deref(), Some("travel.inventory.hotels/h1"));
        assert_eq!(out.hits[0].score, Some(0.9));
        assert_eq!(out.hits[0].metadata["fields"]["stars"], 4);
    }

    #[test]
    fn failures_read_as_crewais() {
        let env = Fake { fail: Some(Failure::Service("internal server failure: HTTP 500".into())), ..Fake::new() };
        let tool = Tool::open(&config(""), &Fake::new()).unwrap();
        assert_eq!(
            tool.call(r#"{"query":"x"}"#, &env).unwrap_err(),
            ToolError::Upstream("Search failed with error: internal server failure: HTTP 500".into())
        );
        for (args, msg) in [
            ("{}", "query is required"),
            (r#"{"query":""}"#, "cannot be empty"),
            (r#"{"query":1}"#, "must be a string"),
            (r#"{"query":"x","k":3}"#, "unknown argument `k`"),
            (r#"{"query":"x","prefilter":{}}"#, "query-string syntax"),
        ] {
            assert!(
                matches!(tool.call(args, &env).unwrap_err(), ToolError::InvalidArgs(m) if m.contains(msg)),
                "{args}"
            );
        }
    }
}

#[cfg(test)]
mod schema_tests {
    use super::*;

    /// The derived schema is the one written by hand before (as of c8d5fbc).
    #[test]
    fn the_derived_schema_is_the_hand_written_one() {
        assert_eq!(
            tool_guest::args::schema_for::<Args>(),
            json!({
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "description": "The query to search retrieve relevant information from the Couchbase database. Pass only the query, not the question."
                    },
                    "prefilter": {
                        "type": "string",
                        "description": "Optional. Only documents matching this Couchbase Search query string are ranked, e.g. `+city:paris stars:>=4`."
                    }
                },
                "required": ["query"],
                "additionalProperties": false
            })
        );
    }
}
