//! Bedrock's service JSON (restJson1 bodies, as the WIT carries them) to the SDK's types and
//! back.

use aws_sdk_bedrockagentruntime::operation::retrieve::RetrieveOutput;
use aws_sdk_bedrockagentruntime::types as sdk;
use aws_smithy_types::{Document, Number};
use serde_json::{Map, Value, json};

/// The parts of a RetrieveRequest body, as SDK types.
pub struct Request {
    /// `retrievalQuery`.
    pub query: sdk::KnowledgeBaseQuery,
    /// `retrievalConfiguration`.
    pub configuration: Option<sdk::KnowledgeBaseRetrievalConfiguration>,
    /// `guardrailConfiguration`.
    pub guardrail: Option<sdk::GuardrailConfiguration>,
    /// `nextToken`.
    pub next_token: Option<String>,
    /// `userContext`.
    pub user: Option<sdk::UserContext>,
}

fn object<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object().ok_or_else(|| format!("{path} must be an object"))
}

fn only(o: &Map<String, Value>, path: &str, known: &[&str]) -> Result<(), String> {
    match o.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(format!("{path}.{k} is not supported here; known fields: {}", known.join(", "))),
        None => Ok(()),
    }
}

fn string(o: &Map<String, Value>, key: &str, path: &str) -> Result<Option<String>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("{path}.{key} must be a string")),
    }
}

/// Parses a RetrieveRequest body. Supports the query text, the vector-search configuration
/// (number of results, search type, metadata filters), guardrails, paging and the user context;
/// a field it does not know is an error naming it, never silently dropped.
pub fn request(body: &str) -> Result<Request, String> {
    let v: Value = serde_json::from_str(body).map_err(|e| format!("the request is not JSON: {e}"))?;
    let o = object(&v, "request")?;
    only(
        o,
        "request",
        &["retrievalQuery", "retrievalConfiguration", "guardrailConfiguration", "nextToken", "userContext"],
    )?;
    let q = object(o.get("retrievalQuery").ok_or("request.retrievalQuery is required")?, "retrievalQuery")?;
    only(q, "retrievalQuery", &["text", "type"])?;
    let mut query = sdk::KnowledgeBaseQuery::builder().set_text(string(q, "text", "retrievalQuery")?);
    if let Some(ty) = string(q, "type", "retrievalQuery")? {
        query = query.r#type(sdk::KnowledgeBaseQueryType::from(ty.as_str()));
    }
    let configuration = match o.get("retrievalConfiguration") {
        None | Some(Value::Null) => None,
        Some(c) => {
            let c = object(c, "retrievalConfiguration")?;
            only(c, "retrievalConfiguration", &["vectorSearchConfiguration"])?;
            let vs = match c.get("vectorSearchConfiguration") {
                None => None,
                Some(vs) => Some(vector_search(object(vs, "retrievalConfiguration.vectorSearchConfiguration")?)?),
            };
            Some(sdk::KnowledgeBaseRetrievalConfiguration::builder().set_vector_search_configuration(vs).build())
        }
    };
    let guardrail = match o.get("guardrailConfiguration") {
        None | Some(Value::Null) => None,
        Some(g) => {
            let p = "guardrailConfiguration";
            let g = object(g, p)?;
            only(g, p, &["guardrailId", "guardrailVersion"])?;
            Some(
                sdk::GuardrailConfiguration::builder()
                    .set_guardrail_id(string(g, "guardrailId", p)?)
                    .set_guardrail_version(string(g, "guardrailVersion", p)?)
                    .build()
                    .map_err(|e| format!("{p}: {e}"))?,
            )
        }
    };
    let user = match o.get("userContext") {
        None | Some(Value::Null) => None,
        Some(u) => {
            let u = object(u, "userContext")?;
            only(u, "userContext", &["userId"])?;
            Some(
                sdk::UserContext::builder()
                    .set_user_id(string(u, "userId", "userContext")?)
                    .build()
                    .map_err(|e| format!("userContext: {e}"))?,
            )
        }
    };
    Ok(Request { query: query.build(), configuration, guardrail, next_token: string(o, "nextToken", "request")?, user })
}

fn vector_search(o: &Map<String, Value>) -> Result<sdk::KnowledgeBaseVectorSearchConfiguration, String> {
    let p = "retrievalConfiguration.vectorSearchConfiguration";
    only(o, p, &["numberOfResults", "overrideSearchType", "filter"])?;
    let mut b = sdk::KnowledgeBaseVectorSearchConfiguration::builder();
    if let Some(n) = o.get("numberOfResults") {
        let n =
            n.as_i64().and_then(|n| i32::try_from(n).ok()).ok_or(format!("{p}.numberOfResults must be an integer"))?;
        b = b.number_of_results(n);
    }
    if let Some(s) = string(o, "overrideSearchType", p)? {
        b = b.override_search_type(sdk::SearchType::from(s.as_str()));
    }
    if let Some(f) = o.get("filter") {
        b = b.filter(filter(f, &format!("{p}.filter"))?);
    }
    Ok(b.build())
}

/// A RetrievalFilter: exactly one operator, `andAll`/`orAll` of filters or a `{key, value}`.
fn filter(v: &Value, path: &str) -> Result<sdk::RetrievalFilter, String> {
    let o = object(v, path)?;
    let [(op, arg)] = o.iter().collect::<Vec<_>>()[..] else {
        return Err(format!(
            "{path} must have exactly one operator, like {{\"equals\": {{\"key\": \"k\", \"value\": \"v\"}}}}"
        ));
    };
    let here = format!("{path}.{op}");
    let list = |arg: &Value| -> Result<Vec<sdk::RetrievalFilter>, String> {
        let items = arg.as_array().ok_or(format!("{here} must be a list of filters"))?;
        items.iter().enumerate().map(|(i, f)| filter(f, &format!("{here}[{i}]"))).collect()
    };
    let attr = |arg: &Value| -> Result<sdk::FilterAttribute, String> {
        let a = object(arg, &here)?;
        only(a, &here, &["key", "value"])?;
        sdk::FilterAttribute::builder()
            .set_key(string(a, "key", &here)?)
            .set_value(a.get("value").map(document))
            .build()
            .map_err(|e| format!("{here}: {e}"))
    };
    use sdk::RetrievalFilter as F;
    Ok(match op.as_str() {
        "andAll" => F::AndAll(list(arg)?),
        "orAll" => F::OrAll(list(arg)?),
        "equals" => F::Equals(attr(arg)?),
        "notEquals" => F::NotEquals(attr(arg)?),
        "greaterThan" => F::GreaterThan(attr(arg)?),
        "greaterThanOrEquals" => F::GreaterThanOrEquals(attr(arg)?),
        "lessThan" => F::LessThan(attr(arg)?),
        "lessThanOrEquals" => F::LessThanOrEquals(attr(arg)?),
        "in" => F::In(attr(arg)?),
        "notIn" => F::NotIn(attr(arg)?),
        "listContains" => F::ListContains(attr(arg)?),
        "startsWith" => F::StartsWith(attr(arg)?),
        "stringContains" => F::StringContains(attr(arg)?),
        other => return Err(format!("{path}: unknown filter operator {other:?}")),
    })
}

/// JSON to a Smithy document.
pub fn document(v: &Value) -> Document {
    match v {
        Value::Null => Document::Null,
        Value::Bool(b) => Document::Bool(*b),
        Value::Number(n) => Document::Number(if let Some(u) = n.as_u64() {
            Number::PosInt(u)
        } else if let Some(i) = n.as_i64() {
            Number::NegInt(i)
        } else {
            Number::Float(n.as_f64().unwrap_or(0.0))
        }),
        Value::String(s) => Document::String(s.clone()),
        Value::Array(a) => Document::Array(a.iter().map(document).collect()),
        Value::Object(o) => Document::Object(o.iter().map(|(k, v)| (k.clone(), document(v))).collect()),
    }
}

/// A Smithy document to JSON.
pub fn json_of(d: &Document) -> Value {
    match d {
        Document::Null => Value::Null,
        Document::Bool(b) => json!(b),
        Document::Number(Number::PosInt(u)) => json!(u),
        Document::Number(Number::NegInt(i)) => json!(i),
        Document::Number(Number::Float(f)) => json!(f),
        Document::String(s) => json!(s),
        Document::Array(a) => Value::Array(a.iter().map(json_of).collect()),
        Document::Object(o) => {
            let mut m: Vec<_> = o.iter().collect();
            m.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(m.into_iter().map(|(k, v)| (k.clone(), json_of(v))).collect())
        }
    }
}

/// A RetrieveResponse body, as the service would have sent it.
pub fn response(out: &RetrieveOutput) -> Value {
    let results: Vec<Value> = out
        .retrieval_results()
        .iter()
        .map(|r| {
            let mut o = Map::new();
            if let Some(c) = r.content() {
                let mut content = Map::new();
                if let Some(ty) = c.r#type() {
                    content.insert("type".into(), json!(ty.as_str()));
                }
                content.insert("text".into(), json!(c.text()));
                if let Some(b) = c.byte_content() {
                    content.insert("byteContent".into(), json!(b));
                }
                if let Some(row) = &c.row {
                    let cols: Vec<Value> = row
                        .iter()
                        .map(|col| {
                            json!({
                                "columnName": col.column_name,
                                "columnValue": col.column_value,
                                "type": col.r#type.as_ref().map(|t| t.as_str()),
                            })
                        })
                        .collect();
                    content.insert("row".into(), Value::Array(cols));
                }
                o.insert("content".into(), Value::Object(content));
            }
            if let Some(l) = r.location() {
                o.insert("location".into(), location(l));
            }
            if let Some(s) = r.score {
                o.insert("score".into(), json!(s));
            }
            if let Some(m) = &r.metadata {
                let mut m: Vec<_> = m.iter().collect();
                m.sort_by(|a, b| a.0.cmp(b.0));
                o.insert(
                    "metadata".into(),
                    Value::Object(m.into_iter().map(|(k, v)| (k.clone(), json_of(v))).collect()),
                );
            }
            if let Some(d) = &r.document_id {
                o.insert("documentId".into(), json!(d));
            }
            Value::Object(o)
        })
        .collect();
    let mut body = json!({ "retrievalResults": results });
    if let Some(t) = &out.next_token {
        body["nextToken"] = json!(t);
    }
    if let Some(g) = &out.guardrail_action {
        body["guardrailAction"] = json!(g.as_str());
    }
    body
}

fn location(l: &sdk::RetrievalResultLocation) -> Value {
    let mut o = Map::new();
    o.insert("type".into(), json!(l.r#type().as_str()));
    let mut put = |key: &str, field: &str, value: Option<&str>| {
        if let Some(v) = value {
            o.insert(key.into(), json!({ field: v }));
        }
    };
    put("s3Location", "uri", l.s3_location.as_ref().and_then(|x| x.uri.as_deref()));
    put("webLocation", "url", l.web_location.as_ref().and_then(|x| x.url.as_deref()));
    put("confluenceLocation", "url", l.confluence_location.as_ref().and_then(|x| x.url.as_deref()));
    put("salesforceLocation", "url", l.salesforce_location.as_ref().and_then(|x| x.url.as_deref()));
    put("sharePointLocation", "url", l.share_point_location.as_ref().and_then(|x| x.url.as_deref()));
    put("customDocumentLocation", "id", l.custom_document_location.as_ref().and_then(|x| x.id.as_deref()));
    put("kendraDocumentLocation", "uri", l.kendra_document_location.as_ref().and_then(|x| x.uri.as_deref()));
    put("sqlLocation", "query", l.sql_location.as_ref().and_then(|x| x.query.as_deref()));
    put("oneDriveLocation", "url", l.one_drive_location.as_ref().and_then(|x| x.url.as_deref()));
    put("googleDriveLocation", "url", l.google_drive_location.as_ref().and_then(|x| x.url.as_deref()));
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_fields_and_unknown_ones() {
        let r = request(
            r#"{"retrievalQuery":{"text":"q"},"nextToken":"t1",
                "retrievalConfiguration":{"vectorSearchConfiguration":{"numberOfResults":7,"overrideSearchType":"HYBRID",
                  "filter":{"andAll":[{"equals":{"key":"lang","value":"en"}},{"greaterThan":{"key":"year","value":2020}}]}}},
                "guardrailConfiguration":{"guardrailId":"g1","guardrailVersion":"DRAFT"}}"#,
        )
        .unwrap();
        assert_eq!(r.query.text(), "q");
        assert_eq!(r.next_token.as_deref(), Some("t1"));
        let vs = r.configuration.unwrap().vector_search_configuration.unwrap();
        assert_eq!(vs.number_of_results, 7);
        assert!(matches!(vs.filter, Some(sdk::RetrievalFilter::AndAll(ref f)) if f.len() == 2));
        assert_eq!(r.guardrail.unwrap().guardrail_version(), "DRAFT");
        let e = request(r#"{"retrievalQuery":{"text":"q"},"retrievalConfiguration":{"vectorSearchConfiguration":{"rerankingConfiguration":{}}}}"#)
            .err()
            .unwrap();
        assert!(e.contains("rerankingConfiguration is not supported"), "{e}");
        let e = request(r#"{"retrievalQuery":{"text":"q"},"retrievalConfiguration":{"vectorSearchConfiguration":{"filter":{"equals":{"key":"a","value":1},"in":{"key":"b","value":[1]}}}}}"#)
            .err()
            .unwrap();
        assert!(e.contains("exactly one operator"), "{e}");
    }
}
