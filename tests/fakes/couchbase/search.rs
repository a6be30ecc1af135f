//! The Search (FTS) REST API: index listings and definitions shaped like Couchbase 7.6 ones,
//! document counts, and queries: kNN with prefilters (dot product against every stored
//! vector) plus the bleve `query`, with the failure modes of [`QueryBehaviour`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use hyper::Response;
use serde_json::{Map, Value, json};

use super::analysis::Analysed;
use super::mgmt::{ReplyBody, reply_json, reply_text};
use super::query_string::{Query, analysed, matches, parse_query};
use super::scoring::{self, Index};
use super::{Doc, IndexSpec, QueryBehaviour, State, uuid_for};

/// The index's name as 7.6 lists it.
fn listed_name(state: &State, idx: &IndexSpec) -> String {
    match &idx.scope {
        Some(scope) if state.spec.qualified_scoped_names => format!("{}.{}.{}", idx.bucket, scope, idx.name),
        _ => idx.name.clone(),
    }
}

/// An index created through the API (`PUT .../index/NAME`): its definition as stored (with the
/// uuid the fake gave it), searched over the live documents of the collections its type
/// mappings name. Indexed at once: a query sees every write before it (a real Search service
/// indexes a moment later, unless the query asks for consistency with the writes).
#[derive(Debug, Clone)]
pub(super) struct CreatedIndex {
    bucket: String,
    scope: String,
    name: String,
    def: Value,
}

/// An index as a request finds it: one of the spec's, or one created through the API with its
/// documents as they are now.
struct Found {
    spec: Arc<IndexSpec>,
    def: Option<Value>,
    /// Its fields analysed, built as queries need them, kept as long as its documents are.
    analysed: Arc<Analysed>,
}

fn from_spec(idx: &IndexSpec) -> Found {
    Found { spec: Arc::new(idx.clone()), def: None, analysed: Arc::default() }
}

/// The scoped index a name in a scoped path means (bare or `bucket.scope.name`).
fn find_scoped(state: &State, bucket: &str, scope: &str, name: &str) -> Option<Found> {
    let named = |b: &str, s: &str, n: &str| b == bucket && s == scope && (n == name || format!("{b}.{s}.{n}") == name);
    if let Some(c) = state.created.lock().iter().find(|c| named(&c.bucket, &c.scope, &c.name)) {
        return Some(materialise(state, c));
    }
    state.spec.indexes.iter().find(|i| i.scope.as_deref().is_some_and(|s| named(&i.bucket, s, &i.name))).map(from_spec)
}

/// The index a cluster-level path means: a bucket-level index by name, or a scoped one by its
/// full `bucket.scope.name` (as a real server allows).
fn find_cluster(state: &State, name: &str) -> Option<Found> {
    if let Some(c) = state.created.lock().iter().find(|c| format!("{}.{}.{}", c.bucket, c.scope, c.name) == name) {
        return Some(materialise(state, c));
    }
    state
        .spec
        .indexes
        .iter()
        .find(|i| match &i.scope {
            None => i.name == name,
            Some(scope) => format!("{}.{}.{}", i.bucket, scope, i.name) == name,
        })
        .map(from_spec)
}

/// The vector fields of a definition's type mappings: `(type, path, dims)`.
fn mapped_vectors(def: &Value) -> Vec<(String, String, usize)> {
    fn walk(m: &Value, prefix: &str, ty: &str, out: &mut Vec<(String, String, usize)>) {
        for f in m.get("fields").and_then(Value::as_array).into_iter().flatten() {
            if f.get("type").and_then(Value::as_str) == Some("vector") {
                let dims = f.get("dims").and_then(Value::as_u64).unwrap_or(0) as usize;
                out.push((ty.to_string(), prefix.to_string(), dims));
            }
        }
        for (name, sub) in m.get("properties").and_then(Value::as_object).into_iter().flatten() {
            let p = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
            walk(sub, &p, ty, out);
        }
    }
    let mut out = Vec::new();
    for (ty, m) in def.pointer("/params/mapping/types").and_then(Value::as_object).into_iter().flatten() {
        walk(m, "", ty, &mut out);
    }
    out
}

/// The paths a definition's type mappings analyse with the `keyword` analyzer (a mapping's
/// `default_analyzer`, or a field's `analyzer`): their values are indexed whole.
fn keyword_paths(def: &Value) -> Vec<String> {
    fn walk(m: &Value, prefix: &str, out: &mut Vec<String>) {
        if m.get("default_analyzer").and_then(Value::as_str) == Some("keyword") && !prefix.is_empty() {
            out.push(prefix.to_string());
        }
        for f in m.get("fields").and_then(Value::as_array).into_iter().flatten() {
            if f.get("analyzer").and_then(Value::as_str) == Some("keyword") {
                out.push(prefix.to_string());
            }
        }
        for (name, sub) in m.get("properties").and_then(Value::as_object).into_iter().flatten() {
            let p = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
            walk(sub, &p, out);
        }
    }
    let mut out = Vec::new();
    for m in def.pointer("/params/mapping/types").and_then(Value::as_object).into_iter().flatten().map(|(_, m)| m) {
        walk(m, "", &mut out);
    }
    out
}

/// A created index with the documents of its mapped collections, as the spec's are: read again
/// only after a write (the documents are parsed once per version, not once per query; a
/// document that expires leaves the index at the next write).
fn materialise(state: &State, c: &CreatedIndex) -> Found {
    let version = state.docs.version();
    let key = (c.bucket.clone(), c.scope.clone(), c.name.clone(), c.def["uuid"].to_string());
    // A lagging index changes as time passes, not only with writes: read again each time.
    if let Some((v, spec, analysed)) = state.materialised.lock().get(&key)
        && *v == version
        && !state.docs.lagging()
    {
        return Found { spec: spec.clone(), def: Some(c.def.clone()), analysed: analysed.clone() };
    }
    let found = read_index(state, c);
    state.materialised.lock().insert(key, (version, found.spec.clone(), found.analysed.clone()));
    found
}

/// [`materialise`], reading every document.
fn read_index(state: &State, c: &CreatedIndex) -> Found {
    let vectors = mapped_vectors(&c.def);
    let (field, dims) = vectors.first().map_or((String::new(), 0), |(_, p, d)| (p.clone(), *d));
    let ids = state.collection_ids(&c.bucket);
    let mut docs = Vec::new();
    let mut collection = None;
    for ty in c.def.pointer("/params/mapping/types").and_then(Value::as_object).into_iter().flatten().map(|(t, _)| t) {
        let Some((scope, coll)) = ty.split_once('.') else { continue };
        let Some((_, id)) = ids.iter().find(|((s, n), _)| s == scope && n == coll) else { continue };
        collection.get_or_insert_with(|| coll.to_string());
        for (key, stored) in state.docs.indexed(&c.bucket, *id) {
            let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(&stored.value) else { continue };
            let mut at = Some(&Value::Object(fields.clone()));
            for part in field.split('.').filter(|p| !p.is_empty()) {
                at = at.and_then(|v| v.get(part));
            }
            let vector = at
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_f64).map(|x| x as f32).collect())
                .unwrap_or_default();
            docs.push(Doc { id: key, vector, fields });
        }
    }
    let spec = IndexSpec {
        name: c.name.clone(),
        bucket: c.bucket.clone(),
        scope: Some(c.scope.clone()),
        collection,
        field,
        dims,
        docs,
    };
    Found { spec: Arc::new(spec), def: Some(c.def.clone()), analysed: Arc::default() }
}

/// Creates or updates a scoped index from the definition a client PUT, as the Search service's
/// `rest_create_index` does: an existing index is replaced only when the request names its
/// current uuid.
fn put_index(state: &State, bucket: &str, scope: &str, name: &str, body: &Value) -> Response<ReplyBody> {
    let fail = |m: String| reply_json(400, &json!({"error": m, "status": "fail"}));
    if state.bucket(bucket).is_none_or(|b| !b.scopes.iter().any(|(n, _)| n == scope)) {
        return fail(format!(
            "rest_create_index: error creating index: {name}, err: manager_api: CreateIndex, prepare failed, err: bucket: {bucket}, scope: {scope}, requested resource not found"
        ));
    }
    if body.get("type").and_then(Value::as_str) != Some("fulltext-index") {
        return fail(format!(
            "rest_create_index: error creating index: {name}, err: manager_api: CreateIndex, indexType: {:?}, unknown indexType",
            body.get("type")
        ));
    }
    if body.get("sourceName").and_then(Value::as_str) != Some(bucket) {
        return fail(format!(
            "rest_create_index: error creating index: {name}, err: manager_api: CreateIndex, sourceName must be the bucket {bucket}"
        ));
    }
    if let Err(e) = check_mapping(body.pointer("/params/mapping"), state.spec.version_8) {
        return fail(format!(
            "rest_create_index: error creating index: {name}, err: manager_api: CreateIndex, Prepare failed, err: {e}"
        ));
    }
    for (ty, _, dims) in mapped_vectors(body) {
        if !(1..=4096).contains(&dims) {
            return fail(format!(
                "rest_create_index: error creating index: {name}, err: bleve: mapping type {ty}: invalid vector dims {dims}, must be within [1, 4096]"
            ));
        }
    }
    let mut created = state.created.lock();
    let existing = created.iter().position(|c| c.bucket == bucket && c.scope == scope && c.name == name);
    let sent_uuid = body.get("uuid").and_then(Value::as_str).unwrap_or_default();
    if let Some(i) = existing {
        let current = created[i].def["uuid"].as_str().unwrap_or_default().to_string();
        if sent_uuid != current {
            return fail(format!(
                "rest_create_index: error creating index: {bucket}.{scope}.{name}, err: manager_api: cannot create index because an index with the same name already exists: {bucket}.{scope}.{name}"
            ));
        }
        created.remove(i);
    }
    let uuid = uuid_for(&format!("created/{bucket}/{scope}/{name}/{}", state.next_uuid()))[..16].to_string();
    let mut def = body.clone();
    def["name"] =
        json!(if state.spec.qualified_scoped_names { format!("{bucket}.{scope}.{name}") } else { name.to_string() });
    def["uuid"] = json!(uuid);
    def["sourceUUID"] = json!(uuid_for(bucket));
    created.push(CreatedIndex { bucket: bucket.into(), scope: scope.into(), name: name.into(), def });
    reply_json(200, &json!({"status": "ok", "name": name, "uuid": uuid}))
}

/// The index mapping's own keys, as bleve reads them with `MappingJSONStrict` (cbft sets it):
/// an unknown key is refused, and `scoring_model` is known from Couchbase 8.0 (bleve 2.5) on.
fn check_mapping(mapping: Option<&Value>, version_8: bool) -> Result<(), String> {
    const KNOWN: &[&str] = &[
        "types",
        "default_mapping",
        "type_field",
        "default_type",
        "default_analyzer",
        "default_datetime_parser",
        "default_field",
        "store_dynamic",
        "index_dynamic",
        "docvalues_dynamic",
        "analysis",
    ];
    let Some(m) = mapping.and_then(Value::as_object) else { return Ok(()) };
    let invalid: Vec<&str> = m
        .keys()
        .map(String::as_str)
        .filter(|k| !KNOWN.contains(k) && !(version_8 && (*k == "scoring_model" || *k == "default_synonym_source")))
        .collect();
    if !invalid.is_empty() {
        return Err(format!("bleve: index mapping contains invalid keys: [{}]", invalid.join(" ")));
    }
    match m.get("scoring_model").and_then(Value::as_str) {
        None | Some("" | "tf-idf" | "bm25") => Ok(()),
        Some(other) => Err(format!("bleve: unsupported scoring model: {other}")),
    }
}

fn index_not_found() -> Response<ReplyBody> {
    reply_json(400, &json!({"error": "rest_auth: preparePerms, err: index not found", "status": "fail"}))
}

pub(super) async fn fts(state: &State, method: &str, segs: &[&str], body: &Value) -> Response<ReplyBody> {
    match (method, segs) {
        ("GET", ["api", "index"]) => {
            let defs: Map<String, Value> = state
                .spec
                .indexes
                .iter()
                .filter(|i| i.scope.is_none() || state.spec.cluster_lists_scoped)
                .map(|i| (listed_name(state, i), index_def(state, i)))
                .collect();
            reply_json(200, &json!({"status": "ok", "indexDefs": {"implVersion": "5.5.0", "indexDefs": defs}}))
        }
        ("GET", ["api", "bucket", b, "scope", s, "index"]) => {
            if state.bucket(b).is_none_or(|bk| !bk.scopes.iter().any(|(n, _)| n == s)) {
                return reply_json(
                    400,
                    &json!({"error": format!("rest_auth: preparePerms, err: bucket: {b}, scope: {s}, requested resource not found"), "status": "fail"}),
                );
            }
            let mut defs: Map<String, Value> = state
                .spec
                .indexes
                .iter()
                .filter(|i| i.bucket == *b && i.scope.as_deref() == Some(*s))
                .map(|i| (listed_name(state, i), index_def(state, i)))
                .collect();
            for c in state.created.lock().iter().filter(|c| c.bucket == *b && c.scope == *s) {
                defs.insert(c.def["name"].as_str().unwrap_or_default().to_string(), c.def.clone());
            }
            reply_json(200, &json!({"status": "ok", "indexDefs": {"implVersion": "5.5.0", "indexDefs": defs}}))
        }
        ("GET", ["api", "index", i]) => match find_cluster(state, i) {
            Some(f) => reply_json(200, &json!({"status": "ok", "indexDef": definition(state, &f)})),
            None => index_not_found(),
        },
        ("GET", ["api", "bucket", b, "scope", s, "index", i]) => match find_scoped(state, b, s, i) {
            Some(f) => reply_json(200, &json!({"status": "ok", "indexDef": definition(state, &f)})),
            None => index_not_found(),
        },
        ("PUT", ["api", "bucket", b, "scope", s, "index", i]) => put_index(state, b, s, i, body),
        ("DELETE", ["api", "bucket", b, "scope", s, "index", i]) => {
            let mut created = state.created.lock();
            match created.iter().position(|c| c.bucket == *b && c.scope == *s && c.name == *i) {
                Some(at) => {
                    let gone = created.remove(at);
                    reply_json(200, &json!({"status": "ok", "uuid": gone.def["uuid"]}))
                }
                None => index_not_found(),
            }
        }
        ("GET", ["api", "index", i, "count"]) => match find_cluster(state, i) {
            Some(f) => reply_json(200, &json!({"status": "ok", "count": f.spec.docs.len()})),
            None => index_not_found(),
        },
        ("GET", ["api", "bucket", b, "scope", s, "index", i, "count"]) => match find_scoped(state, b, s, i) {
            Some(f) => reply_json(200, &json!({"status": "ok", "count": f.spec.docs.len()})),
            None => index_not_found(),
        },
        ("POST", ["api", "index", i, "query"]) => query_endpoint(state, find_cluster(state, i).as_ref(), body).await,
        ("POST", ["api", "bucket", b, "scope", s, "index", i, "query"]) => {
            query_endpoint(state, find_scoped(state, b, s, i).as_ref(), body).await
        }
        ("GET", ["api", "ping"]) => reply_json(200, &json!({"status": "ok"})),
        _ => reply_text(404, "404 page not found\n"),
    }
}

async fn query_endpoint(state: &State, found: Option<&Found>, body: &Value) -> Response<ReplyBody> {
    let behaviour = *state.behaviour.lock();
    match behaviour {
        QueryBehaviour::Normal => {}
        QueryBehaviour::Slow(d) => tokio::time::sleep(d).await,
        QueryBehaviour::Status500 => {
            return reply_json(
                500,
                &json!({"error": "rest_index: Query, err: pindex not available, fake search node failure", "status": "fail"}),
            );
        }
        QueryBehaviour::DropMidResponse => {
            let partial = Bytes::from_static(
                b"{\"status\":{\"total\":1,\"failed\":0,\"successful\":1},\"hits\":[{\"index\":\"x\",\"id\":\"hotel_1\",\"sco",
            );
            return Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .header("content-length", "4096")
                .body(ReplyBody::Truncated(Some(partial), None))
                .expect("valid response");
        }
    }
    let Some(found) = found else { return index_not_found() };
    let idx = &found.spec;
    let def = definition(state, found);
    let keyword = keyword_paths(&def);
    let started = Instant::now();
    let index = Index { docs: &idx.docs, analysed: &found.analysed, def: &def };
    match run_query(state, idx, &index, body, &keyword) {
        Ok(mut result) => {
            result["took"] = json!(started.elapsed().as_nanos() as u64);
            reply_json(200, &result)
        }
        Err(message) => reply_json(
            400,
            &json!({"error": format!("rest_index: Query, indexName: {}, err: {message}", listed_name(state, idx)), "status": "fail"}),
        ),
    }
}

/// What `GET .../index/NAME` answers: a created index's stored definition, or the spec's.
fn definition(state: &State, f: &Found) -> Value {
    f.def.clone().unwrap_or_else(|| index_def(state, &f.spec))
}

/// A 7.6 vector index definition: the vector field, plus a stored mapping for every field the
/// documents carry (so `fields: ["*"]` has something to return on a real server too).
fn index_def(state: &State, idx: &IndexSpec) -> Value {
    let mut properties = Map::new();
    properties.insert(
        idx.field.clone(),
        json!({"dynamic": false, "enabled": true, "fields": [{
            "dims": idx.dims, "index": true, "name": idx.field, "similarity": "dot_product",
            "type": "vector", "vector_index_optimized_for": "recall"
        }]}),
    );
    let mut field_types: BTreeMap<String, &'static str> = BTreeMap::new();
    for d in &idx.docs {
        for (k, v) in &d.fields {
            let t = match v {
                Value::Number(_) => "number",
                Value::Bool(_) => "boolean",
                _ => "text",
            };
            field_types.entry(k.clone()).or_insert(t);
        }
    }
    for (k, t) in field_types {
        let mut f = json!({"index": true, "name": k, "store": true, "type": t});
        if t == "text" {
            f["analyzer"] = json!("standard");
            f["include_in_all"] = json!(true);
        }
        properties.insert(k, json!({"dynamic": false, "enabled": true, "fields": [f]}));
    }
    let type_mapping = json!({"dynamic": false, "enabled": true, "properties": properties});
    let (doc_config, default_mapping, types) = match &idx.scope {
        Some(scope) => {
            let collection = idx.collection.clone().unwrap_or_else(|| {
                state
                    .bucket(&idx.bucket)
                    .and_then(|b| b.scopes.iter().find(|(n, _)| n == scope))
                    .and_then(|(_, cols)| cols.first().cloned())
                    .unwrap_or_else(|| "_default".into())
            });
            let mut types = Map::new();
            types.insert(format!("{scope}.{collection}"), type_mapping);
            (
                json!({"docid_prefix_delim": "", "docid_regexp": "", "mode": "scope.collection.type_field", "type_field": "type"}),
                json!({"dynamic": true, "enabled": false}),
                Value::Object(types),
            )
        }
        None => (
            json!({"docid_prefix_delim": "", "docid_regexp": "", "mode": "type_field", "type_field": "type"}),
            type_mapping,
            json!({}),
        ),
    };
    json!({
        "type": "fulltext-index",
        "name": listed_name(state, idx),
        "uuid": &uuid_for(&format!("index/{}/{:?}/{}", idx.bucket, idx.scope, idx.name))[..16],
        "sourceType": "gocbcore",
        "sourceName": idx.bucket,
        "sourceUUID": uuid_for(&idx.bucket),
        "planParams": {"maxPartitionsPerPIndex": 1024, "indexPartitions": 1, "numReplicas": 0},
        "params": {
            "doc_config": doc_config,
            "mapping": {
                "analysis": {},
                "default_analyzer": "standard",
                "default_datetime_parser": "dateTimeOptional",
                "default_field": "_all",
                "default_mapping": default_mapping,
                "default_type": "_default",
                "docvalues_dynamic": false,
                "index_dynamic": true,
                "store_dynamic": false,
                "type_field": "_type",
                "types": types,
            },
            "store": {"indexType": "scorch", "segmentVersion": 16},
        },
        "sourceParams": {},
    })
}

/// The query vector of a kNN request: `vector`, or `vector_base64` (little-endian f32s).
fn knn_vector(k: &Value) -> Result<Vec<f32>, String> {
    if let Some(v) = k.get("vector").and_then(Value::as_array).filter(|v| !v.is_empty()) {
        return v.iter().map(|x| x.as_f64().map(|f| f as f32).ok_or("vector must hold numbers".to_string())).collect();
    }
    if let Some(b) = k.get("vector_base64").and_then(Value::as_str).filter(|b| !b.is_empty()) {
        let bytes = B64.decode(b).map_err(|e| format!("error decoding vector_base64: {e}"))?;
        if bytes.len() % 4 != 0 {
            return Err("decoded byte array not divisible by 4".into());
        }
        return Ok(bytes.chunks(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect());
    }
    Ok(vec![])
}

/// A request's `sort`, as (by id, descending) keys: `_id`, `_score` (a `-` before either
/// descends) or the SDK's `{"by": "id" | "score", "desc": ...}`; the default is by score,
/// descending. Field and geo sorts are not faked.
fn sort_order(sort: Option<&Value>) -> Result<Vec<(bool, bool)>, String> {
    let Some(keys) = sort.and_then(Value::as_array).filter(|a| !a.is_empty()) else { return Ok(vec![(false, true)]) };
    keys.iter()
        .map(|k| match k {
            Value::String(s) => match s.as_str() {
                "_id" => Ok((true, false)),
                "-_id" => Ok((true, true)),
                "_score" => Ok((false, false)),
                "-_score" => Ok((false, true)),
                other => Err(format!("fake_couchbase does not implement sorting by {other:?}")),
            },
            Value::Object(o) => {
                let desc = o.get("desc").and_then(Value::as_bool).unwrap_or(false);
                match o.get("by").and_then(Value::as_str) {
                    Some("id") => Ok((true, desc)),
                    Some("score") => Ok((false, desc)),
                    other => Err(format!("fake_couchbase does not implement sorting by {other:?}")),
                }
            }
            _ => Err("bleve: QueryBleve parsing searchRequest, err: unknown sort".into()),
        })
        .collect()
}

fn run_query(
    state: &State,
    idx: &IndexSpec,
    index: &Index<'_>,
    body: &Value,
    keyword: &[String],
) -> Result<Value, String> {
    let size = body.get("size").and_then(Value::as_i64).filter(|s| *s >= 0).unwrap_or(10) as usize;
    let from = body.get("from").and_then(Value::as_i64).filter(|f| *f >= 0).unwrap_or(0) as usize;
    let query = match body.get("query") {
        Some(q) if !q.is_null() => {
            analysed(parse_query(q).map_err(|e| format!("bleve: QueryBleve parsing searchRequest, err: {e}"))?, keyword)
        }
        _ => Query::None,
    };
    let knns = body.get("knn").and_then(Value::as_array).cloned().unwrap_or_default();
    let operator_and = match body.get("knn_operator").and_then(Value::as_str) {
        None | Some("") | Some("or") => false,
        Some("and") => true,
        Some(_) => {
            return Err("bleve: QueryBleve validating request, err: knn_operator must be either 'and' / 'or'".into());
        }
    };

    // Score per doc: the query's as bleve scores it, plus each kNN's (boosted) similarity.
    let plan = scoring::compile(query, index);
    let norm = scoring::query_norm(&plan);
    let mut scores: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    for (i, d) in idx.docs.iter().enumerate() {
        if let Some(score) = plan.score(d, i, norm) {
            scores.insert(&d.id, (score, 0));
        }
    }
    let mut effective_knns = 0;
    for k in &knns {
        let vector = knn_vector(k).map_err(|e| format!("bleve: QueryBleve validating request, err: {e}"))?;
        let kk = k.get("k").and_then(Value::as_i64).unwrap_or(0);
        if kk <= 0 || vector.is_empty() {
            return Err(
                "bleve: QueryBleve validating request, err: k must be greater than 0 and vector must be non-empty"
                    .into(),
            );
        }
        let field = k.get("field").and_then(Value::as_str).unwrap_or_default();
        if field.is_empty() {
            return Err("bleve: QueryBleve validating request, err: knn query field must be non-empty".into());
        }
        let filter = match k.get("filter") {
            Some(f) if !f.is_null() => Some(analysed(
                parse_query(f).map_err(|e| format!("bleve: QueryBleve parsing searchRequest, err: {e}"))?,
                keyword,
            )),
            _ => None,
        };
        if field != idx.field {
            // bleve: a kNN on a field with no vector mapping finds nothing.
            continue;
        }
        effective_knns += 1;
        if vector.len() != idx.dims {
            return Err(format!(
                "bleve: QueryBleve validating request, err: vector dimension mismatch for field `{field}`: query vector has {} dims, field has {}",
                vector.len(),
                idx.dims
            ));
        }
        let boost = k.get("boost").and_then(Value::as_f64).unwrap_or(1.0);
        let mut candidates: Vec<(&Doc, f64)> = idx
            .docs
            .iter()
            .filter(|d| filter.as_ref().is_none_or(|f| matches(f, d)))
            .filter(|d| d.vector.len() == vector.len())
            .map(|d| (d, d.vector.iter().zip(&vector).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum::<f64>()))
            .collect();
        candidates.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.id.cmp(&b.0.id)));
        for (d, score) in candidates.into_iter().take(kk as usize) {
            let e = scores.entry(&d.id).or_insert((0.0, 0));
            e.0 += score * boost;
            e.1 += 1;
        }
    }
    if operator_and && effective_knns > 0 {
        // "and": a kNN hit must be among every kNN's top k (query-only hits stay).
        scores.retain(|_, (_, n)| *n == 0 || *n == effective_knns);
    }
    let mut hits: Vec<(&str, f64)> = scores.into_iter().map(|(id, (s, _))| (id, s)).collect();
    let order = sort_order(body.get("sort"))?;
    hits.sort_by(|a, b| {
        order
            .iter()
            .map(|(by_id, desc)| {
                let o = if *by_id { a.0.cmp(b.0) } else { a.1.total_cmp(&b.1) };
                if *desc { o.reverse() } else { o }
            })
            .find(|o| o.is_ne())
            .unwrap_or_else(|| a.0.cmp(b.0))
    });
    let total_hits = hits.len();
    let max_score = hits.first().map_or(0.0, |h| h.1);

    let wanted: Vec<String> = body
        .get("fields")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    let pindex = format!(
        "{}_{}_{}",
        listed_name(state, idx),
        &uuid_for(&format!("index/{}/{:?}/{}", idx.bucket, idx.scope, idx.name))[..16],
        &uuid_for(&idx.name)[..8]
    );
    let rows: Vec<Value> = hits
        .into_iter()
        .skip(from)
        .take(size)
        .map(|(id, score)| {
            let mut hit = json!({"index": pindex, "id": id, "score": score, "sort": ["_score"]});
            let doc = idx.docs.iter().find(|d| d.id == id);
            if let Some(doc) = doc
                && !wanted.is_empty()
            {
                let fields: Map<String, Value> = doc
                    .fields
                    .iter()
                    .filter(|(k, _)| wanted.iter().any(|w| w == "*" || w == *k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if !fields.is_empty() {
                    hit["fields"] = Value::Object(fields);
                }
            }
            hit
        })
        .collect();
    let mut result = json!({
        "status": {"total": 1, "failed": 0, "successful": 1},
        "hits": rows,
        "total_hits": total_hits,
        "cost": 0,
        "max_score": max_score,
        "took": 0,
        "facets": null,
    });
    if body.get("showrequest").and_then(Value::as_bool) == Some(true) {
        result["request"] = body.clone();
    }
    Ok(result)
}
