//! The component: WIT glue around [`crate::tool`], over the host's `couchbase` capability and
//! the host-linked embedder.

wit_bindgen::generate!({
    path: "../../wit",
    world: "couchbase-search",
    // Quarry's own interfaces are bound once, in tool-guest, for every tool component.
    with: {
        "quarry:retrieval/types@0.6.0": tool_guest::types,
        "quarry:retrieval/embedder@0.6.0": tool_guest::embedder,
    },
    generate_all,
});

use quarry::retrieval::couchbase::{self as cb, CouchbaseError, IndexScope};
use tool_guest::GuestEnv;
use tool_guest::tool::BaseEnv;

use crate::tool::{self, Env, Failure, IndexAt, IndexInfo, Model, Query, Row, Tool, VectorField};

/// The host's embedder and Couchbase.
struct Host;

/// tool-guest's embedder binding (this component reads no files).
const EMBEDDER: GuestEnv = GuestEnv { file_kind: "a file" };

fn failure(e: CouchbaseError) -> Failure {
    match e {
        CouchbaseError::Unavailable(m) => Failure::Unavailable(m),
        CouchbaseError::NotFound(m) => Failure::NotFound(m),
        CouchbaseError::Denied(m) => Failure::Denied(m),
        CouchbaseError::InvalidRequest(m) => Failure::InvalidRequest(m),
        CouchbaseError::Service(m) => Failure::Service(m),
    }
}

fn index_scope(at: &IndexAt) -> IndexScope {
    match at {
        IndexAt::Scoped(b, s) => IndexScope::Scoped((b.clone(), s.clone())),
        IndexAt::Cluster => IndexScope::Cluster,
    }
}

impl Env for Host {
    fn model(&self) -> Model {
        EMBEDDER.model()
    }

    fn embed_query(&self, text: &str) -> Result<Vec<f32>, tool::ToolError> {
        let mut v = EMBEDDER.embed(&[text.to_string()], true)?;
        Ok(v.pop().unwrap_or_default())
    }

    fn bucket_exists(&self, bucket: &str) -> Result<bool, Failure> {
        cb::bucket_exists(bucket).map_err(failure)
    }

    fn scopes(&self, bucket: &str) -> Result<Vec<(String, Vec<String>)>, Failure> {
        Ok(cb::scopes(bucket).map_err(failure)?.into_iter().map(|s| (s.name, s.collections)).collect())
    }

    fn search_indexes(&self, at: &IndexAt) -> Result<Vec<IndexInfo>, Failure> {
        let all = cb::search_indexes(&index_scope(at)).map_err(failure)?;
        Ok(all
            .into_iter()
            .map(|i| IndexInfo {
                name: i.name,
                vector_fields: i
                    .vector_fields
                    .into_iter()
                    .map(|f| VectorField { path: f.path, dims: f.dims, similarity: f.similarity })
                    .collect(),
            })
            .collect())
    }

    fn search(&self, q: &Query) -> Result<Vec<Row>, Failure> {
        let req = cb::VectorSearch {
            at: index_scope(&q.at),
            index: q.index.clone(),
            field: q.field.clone(),
            vector: q.vector.clone(),
            k: q.k,
            limit: q.limit,
            fields: q.fields.clone(),
            prefilter: q.prefilter.clone(),
        };
        let rows = cb::search(&req).map_err(failure)?;
        Ok(rows.into_iter().map(|r| Row { id: r.id, score: r.score, fields: r.fields }).collect())
    }
}

tool_guest::export_tools!(Tool, one: tool::NAME, host: Host);
