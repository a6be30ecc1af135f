//! Search indexes and vector searches (scoped through the SDK, cluster-level through the core
//! agent), checked against the grant; the rows they bring into the host (bounded), and what an
//! index definition says.

use futures::StreamExt;
use serde_json::Value;
use tokio::time::Instant;

use super::client::Client;
use super::errors::{Result, core_error, internal, sdk_error};
use super::grant::{MAX_ROWS, check_bucket_name, check_index_name, check_scope_name};
use crate::wit::{CouchbaseError, IndexScope, SearchIndex, SearchRow, VectorField, VectorSearch};

/// The widest query vector sent (the Search service indexes vectors of at most 4096
/// dimensions).
pub const MAX_VECTOR_DIMS: usize = 4096;
/// The most stored fields a search may ask for.
pub const MAX_FIELDS: usize = 256;
/// The longest field name (the vector field's, or a stored field's).
pub const MAX_FIELD_NAME: usize = 512;
/// The longest prefilter query.
pub const MAX_PREFILTER: usize = 64 << 10;

/// Checks what a search carries before the host copies and encodes it: each part is bounded,
/// so a request holds at most about 100 KiB besides its names.
fn check_request_size(q: &VectorSearch) -> std::result::Result<(), String> {
    if q.vector.len() > MAX_VECTOR_DIMS {
        return Err(format!(
            "the query vector has {} dimensions; the Search service indexes at most {MAX_VECTOR_DIMS}",
            q.vector.len()
        ));
    }
    if q.fields.len() > MAX_FIELDS {
        return Err(format!("{} fields asked for; ask for at most {MAX_FIELDS}, or [\"*\"] for all", q.fields.len()));
    }
    if let Some(f) = std::iter::once(&q.field).chain(&q.fields).find(|f| f.len() > MAX_FIELD_NAME) {
        return Err(format!("a field name of {} bytes is over {MAX_FIELD_NAME}", f.len()));
    }
    if let Some(p) = q.prefilter.as_ref().filter(|p| p.len() > MAX_PREFILTER) {
        return Err(format!("the prefilter is {} bytes, over {MAX_PREFILTER}; filter with a shorter query", p.len()));
    }
    Ok(())
}

impl Client {
    /// The search indexes at `at`.
    pub(super) async fn search_indexes(&self, at: &IndexScope) -> Result<Vec<SearchIndex>> {
        match at {
            IndexScope::Scoped((bucket, scope)) => {
                self.check_scope(bucket, scope)?;
                self.ensure_bucket(bucket).await?;
                let defs = self
                    .bounded("listing search indexes", |c| async move {
                        let all = self
                            .bucket(c, bucket.as_str())
                            .scope(scope.as_str())
                            .search_indexes()
                            .get_all_indexes(None)
                            .await
                            .map_err(|e| sdk_error(&e))?;
                        all.iter().map(|i| serde_json::to_value(i).map_err(internal)).collect::<Result<Vec<_>>>()
                    })
                    .await?;
                Ok(defs.iter().map(|d| search_index(d, true)).collect())
            }
            IndexScope::Cluster => {
                if !self.grant.scopes.iter().any(|(_, s)| s == "*") {
                    return Err(CouchbaseError::Denied(format!(
                        "cluster-level search indexes may cover a whole bucket, so they need one granted whole: add \"BUCKET.*\" to grants.couchbase.scopes ({})",
                        self.grant.granted()
                    )).into());
                }
                let deadline = Instant::now() + self.grant.timeout;
                let agent = self.agent_by(deadline).await?;
                let all = tokio::time::timeout_at(deadline, async {
                    let opts = couchbase_core::options::search_management::GetAllIndexesOptions::new();
                    agent.get_all_search_indexes(&opts).await.map_err(|e| core_error(&e))
                })
                .await
                .map_err(|_| self.no_answer("listing cluster-level search indexes"))??;
                let defs: Vec<Value> =
                    all.iter().map(|i| serde_json::to_value(i).map_err(internal)).collect::<Result<_>>()?;
                // Listed by their full names: a cluster-level search must name a scoped index
                // `bucket.scope.index`, and only the name listed for a granted bucket may pass.
                let granted: Vec<SearchIndex> = defs
                    .iter()
                    .map(|d| search_index(d, false))
                    .filter(|i| self.grant.allows_whole_bucket(&i.source_bucket))
                    .collect();
                self.allowed_indexes.lock().extend(granted.iter().map(|i| i.name.clone()));
                Ok(granted)
            }
        }
    }

    /// Checks the names (they go into request paths) and then the grant.
    fn check_scope(&self, bucket: &str, scope: &str) -> Result<()> {
        check_bucket_name(bucket).map_err(CouchbaseError::InvalidRequest)?;
        check_scope_name(scope).map_err(CouchbaseError::InvalidRequest)?;
        if self.grant.allows_scope(bucket, scope) {
            return Ok(());
        }
        Err(CouchbaseError::Denied(format!(
            "scope {bucket}.{scope} is not in this instance's grants.couchbase.scopes ({}); add \"{bucket}.{scope}\" to use it",
            self.grant.granted()
        )).into())
    }

    /// Runs a vector search.
    pub(super) async fn search(&self, q: &VectorSearch) -> Result<Vec<SearchRow>> {
        if q.vector.is_empty() {
            return Err(CouchbaseError::InvalidRequest("the query vector is empty".into()).into());
        }
        check_request_size(q).map_err(CouchbaseError::InvalidRequest)?;
        if q.limit == 0 || q.k == 0 {
            return Err(CouchbaseError::InvalidRequest("limit and k must be at least 1".into()).into());
        }
        if q.limit > MAX_ROWS || q.k > MAX_ROWS {
            return Err(CouchbaseError::InvalidRequest(format!(
                "limit and k may be at most {MAX_ROWS} (the Search service's result window); ask for fewer rows"
            ))
            .into());
        }
        check_index_name(&q.index, matches!(q.at, IndexScope::Cluster)).map_err(CouchbaseError::InvalidRequest)?;
        match &q.at {
            IndexScope::Scoped((bucket, scope)) => {
                self.check_scope(bucket, scope)?;
                self.scoped_search(bucket, scope, q).await
            }
            IndexScope::Cluster => {
                // The index's bucket decides what the search can reach: look it up, and check
                // that the grant covers the whole bucket.
                let seen = self.allowed_indexes.lock().contains(&q.index);
                if !seen {
                    let indexes = self.search_indexes(&IndexScope::Cluster).await?;
                    if !indexes.iter().any(|i| i.name == q.index) {
                        return Err(CouchbaseError::NotFound(format!(
                            "no cluster-level search index {:?} on a bucket granted whole (\"bucket.*\") to this instance",
                            q.index
                        )).into());
                    }
                    self.allowed_indexes.lock().insert(q.index.clone());
                }
                self.cluster_search(q).await
            }
        }
    }

    pub(super) async fn scoped_search(&self, bucket: &str, scope: &str, q: &VectorSearch) -> Result<Vec<SearchRow>> {
        use couchbase::search::queries::{Query, QueryStringQuery};
        use couchbase::search::request::SearchRequest;
        use couchbase::search::vector::{VectorQuery, VectorSearch as SdkVectorSearch};
        self.ensure_bucket(bucket).await?;
        let mut vq = VectorQuery::with_vector(q.field.as_str(), q.vector.clone()).num_candidates(q.k);
        if let Some(p) = &q.prefilter {
            vq = vq.prefilter(Query::QueryString(QueryStringQuery::new(p.as_str())));
        }
        let req = SearchRequest::with_vector_search(SdkVectorSearch::new(vec![vq], None));
        let mut opts = couchbase::options::search_options::SearchOptions::new().limit(q.limit);
        if !q.fields.is_empty() {
            opts = opts.fields(q.fields.clone());
        }
        self.bounded("searching", |c| async move {
            let mut res = self
                .bucket(c, bucket)
                .scope(scope)
                .search(q.index.as_str(), req, opts)
                .await
                .map_err(|e| sdk_error(&e))?;
            let mut out = Rows::new(self.max_bytes);
            let mut rows = res.rows();
            while let Some(row) = rows.next().await {
                let row = row.map_err(|e| sdk_error(&e))?;
                let fields = row.fields::<Value>().ok().map(|f| f.to_string());
                out.push(SearchRow { id: row.id, score: row.score, fields })?;
            }
            Ok(out.rows)
        })
        .await
    }

    pub(super) async fn cluster_search(&self, q: &VectorSearch) -> Result<Vec<SearchRow>> {
        use couchbase_core::options::search::SearchOptions;
        use couchbase_core::searchx::queries::{MatchNoneQuery, Query, QueryStringQuery};
        use couchbase_core::searchx::query_options::KnnQuery;
        let mut knn = KnnQuery::new(q.field.as_str(), i64::from(q.k)).vector(q.vector.clone());
        if let Some(p) = &q.prefilter {
            knn = knn.filter(Some(Query::QueryString(QueryStringQuery::new(p.as_str()))));
        }
        // The same body the SDK sends for a scoped vector search.
        let mut opts = SearchOptions::new(q.index.as_str())
            .query(Query::MatchNone(MatchNoneQuery::new()))
            .knn(vec![knn])
            .size(q.limit)
            .show_request(false);
        if !q.fields.is_empty() {
            opts = opts.fields(q.fields.clone());
        }
        let deadline = Instant::now() + self.grant.timeout;
        let agent = self.agent_by(deadline).await?;
        tokio::time::timeout_at(deadline, async {
            let mut stream = agent.search(opts).await.map_err(|e| core_error(&e))?;
            let mut out = Rows::new(self.max_bytes);
            while let Some(hit) = stream.next().await {
                let hit = hit.map_err(|e| core_error(&e))?;
                out.push(SearchRow { id: hit.id, score: hit.score, fields: hit.fields.map(|f| f.get().to_string()) })?;
            }
            Ok(out.rows)
        })
        .await
        .map_err(|_| self.no_answer("searching"))?
    }
}

/// Rows collected for the guest, refused once they would take more than the instance's
/// `max_output`: the server (or a hostile one) chooses their size, and they are held in the
/// host until the call returns.
struct Rows {
    rows: Vec<SearchRow>,
    bytes: usize,
    max: usize,
}

impl Rows {
    fn new(max: usize) -> Self {
        Rows { rows: Vec::new(), bytes: 0, max }
    }

    fn push(&mut self, row: SearchRow) -> Result<()> {
        // The id, the fields and the record around them (an f64 and two lengths).
        self.bytes += row.id.len() + row.fields.as_ref().map_or(0, String::len) + 32;
        if self.bytes > self.max {
            return Err(CouchbaseError::Service(format!(
                "the search answered more than grants.max_output ({} bytes) of rows after {} rows; ask for fewer rows or fields",
                self.max,
                self.rows.len()
            )).into());
        }
        self.rows.push(row);
        Ok(())
    }
}

/// A search index from its definition (the SDK's or the core's, serialised). A 7.6 server lists
/// scoped indexes as `bucket.scope.index`; `strip` drops that prefix (a scoped listing, whose
/// searches name the index inside its scope).
pub(super) fn search_index(def: &Value, strip: bool) -> SearchIndex {
    let full = def.get("name").and_then(Value::as_str).unwrap_or_default();
    let name = if strip { full.rsplit('.').next().unwrap_or(full) } else { full }.to_string();
    SearchIndex {
        name,
        source_bucket: def
            .get("sourceName")
            .or_else(|| def.get("source_name"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        vector_fields: vector_fields(def),
        definition: def.to_string(),
    }
}

/// The vector fields an index definition maps: every `vector` (or `vector_base64`) field under
/// the default mapping or a type mapping, by its query path (`a.b.field`).
pub fn vector_fields(def: &Value) -> Vec<VectorField> {
    fn walk(mapping: &Value, prefix: &str, out: &mut Vec<VectorField>) {
        if let Some(fields) = mapping.get("fields").and_then(Value::as_array) {
            for f in fields {
                let ty = f.get("type").and_then(Value::as_str).unwrap_or_default();
                if ty != "vector" && ty != "vector_base64" {
                    continue;
                }
                let leaf = f.get("name").and_then(Value::as_str).unwrap_or_default();
                let path = match (prefix.rsplit_once('.'), leaf.is_empty()) {
                    (_, true) => prefix.to_string(),
                    (Some((parent, _)), false) => format!("{parent}.{leaf}"),
                    (None, false) => leaf.to_string(),
                };
                out.push(VectorField {
                    path,
                    dims: f.get("dims").and_then(Value::as_u64).and_then(|d| u32::try_from(d).ok()).unwrap_or(0),
                    similarity: f.get("similarity").and_then(Value::as_str).unwrap_or_default().to_string(),
                });
            }
        }
        if let Some(props) = mapping.get("properties").and_then(Value::as_object) {
            for (name, sub) in props {
                let p = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
                walk(sub, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    let Some(mapping) = def.pointer("/params/mapping") else { return out };
    if let Some(d) = mapping.get("default_mapping") {
        walk(d, "", &mut out);
    }
    if let Some(types) = mapping.get("types").and_then(Value::as_object) {
        for t in types.values() {
            walk(t, "", &mut out);
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out.dedup_by(|a, b| a.path == b.path && a.dims == b.dims);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_search_request_is_bounded_before_it_is_encoded() {
        let q = |dims: usize, fields: Vec<String>, prefilter: Option<String>| VectorSearch {
            at: IndexScope::Cluster,
            index: "i".into(),
            field: "v".into(),
            vector: vec![0.0; dims],
            k: 1,
            limit: 1,
            fields,
            prefilter,
        };
        assert!(check_request_size(&q(384, vec!["*".into()], Some("+a:b".into()))).is_ok());
        let e = check_request_size(&q(MAX_VECTOR_DIMS + 1, vec![], None)).unwrap_err();
        assert!(e.contains("4097 dimensions"), "{e}");
        assert!(check_request_size(&q(8, vec!["f".into(); MAX_FIELDS + 1], None)).is_err());
        assert!(check_request_size(&q(8, vec!["f".repeat(MAX_FIELD_NAME + 1)], None)).is_err());
        assert!(check_request_size(&q(8, vec![], Some("p".repeat(MAX_PREFILTER + 1)))).is_err());
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn vector_fields_in_default_and_type_mappings() {
        let def = json!({"name": "b.s.idx", "sourceName": "b", "params": {"mapping": {
            "default_mapping": {"enabled": false, "properties": {}},
            "types": {"s.c": {"properties": {
                "embedding": {"fields": [{"name": "embedding", "type": "vector", "dims": 384, "similarity": "dot_product"}]},
                "doc": {"properties": {"vec": {"fields": [{"name": "vec", "type": "vector_base64", "dims": 8, "similarity": "l2_norm"}]}}},
                "title": {"fields": [{"name": "title", "type": "text"}]}
            }}}
        }}});
        let idx = search_index(&def, true);
        assert_eq!(idx.name, "idx");
        assert_eq!(idx.source_bucket, "b");
        let f: Vec<_> = idx.vector_fields.iter().map(|f| (f.path.as_str(), f.dims, f.similarity.as_str())).collect();
        assert_eq!(f, [("doc.vec", 8, "l2_norm"), ("embedding", 384, "dot_product")]);
        let plain = json!({"name": "x", "params": {"mapping": {"default_mapping": {"properties": {
            "e": {"fields": [{"name": "e", "type": "vector", "dims": 3}]}}}}}});
        assert_eq!(vector_fields(&plain)[0].path, "e");
        assert!(vector_fields(&json!({"name": "y"})).is_empty());
    }
}
