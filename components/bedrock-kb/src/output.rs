//! A RetrieveResponse, as CrewAI's tool prints it (the text an LLM reads) and as Quarry's hits.
//!
//! CrewAI's text is `json.dumps(obj, indent=2)`, which rag-core's [`pyjson`] writes byte for
//! byte, so an agent moved from CrewAI sees the same text.

pub use rag_core::pyjson::{self, Ordered, dumps, to_value};
use serde_json::{Value, json};

/// Where a result came from: CrewAI's `(source_type, source_uri)`. The type is the location's
/// own `type` (`S3`, `WEB`, …, and the two CrewAI lacks, `ONEDRIVE` and `GOOGLEDRIVE`); the
/// uri is the field of whichever location is present.
pub fn source(location: &Value) -> (String, Option<String>) {
    const FIELDS: &[(&str, &str, &str)] = &[
        ("s3Location", "uri", "S3"),
        ("confluenceLocation", "url", "Confluence"),
        ("salesforceLocation", "url", "Salesforce"),
        ("sharePointLocation", "url", "SharePoint"),
        ("webLocation", "url", "Web"),
        ("customDocumentLocation", "id", "CustomDocument"),
        ("kendraDocumentLocation", "uri", "KendraDocument"),
        ("sqlLocation", "query", "SQL"),
        // Quarry's addition.
        ("oneDriveLocation", "url", "OneDrive"),
        ("googleDriveLocation", "url", "GoogleDrive"),
    ];
    let mut ty = location.get("type").and_then(Value::as_str).unwrap_or("unknown").to_string();
    for (key, field, name) in FIELDS {
        if let Some(l) = location.get(*key) {
            if ty == "unknown" {
                ty = (*name).to_string();
            }
            return (ty, l.get(*field).and_then(Value::as_str).map(str::to_string));
        }
    }
    (ty, None)
}

/// One result, as CrewAI's `_process_retrieval_result` builds it.
pub fn result(r: &Value) -> Ordered {
    let content = r.get("content").cloned().unwrap_or_else(|| json!({}));
    let (source_type, source_uri) = source(r.get("location").unwrap_or(&json!({})));
    let mut o = vec![
        ("content".to_string(), Ordered::Value(content.get("text").cloned().unwrap_or(json!("")))),
        ("content_type".to_string(), Ordered::Value(content.get("type").cloned().unwrap_or(json!("text")))),
        ("source_type".to_string(), Ordered::Value(json!(source_type))),
        ("source_uri".to_string(), Ordered::Value(json!(source_uri))),
    ];
    for (key, from) in [("score", r.get("score")), ("metadata", r.get("metadata"))] {
        if let Some(v) = from {
            o.push((key.to_string(), Ordered::Value(v.clone())));
        }
    }
    for (key, field) in [("byte_content", "byteContent"), ("row_content", "row")] {
        if let Some(v) = content.get(field) {
            o.push((key.to_string(), Ordered::Value(v.clone())));
        }
    }
    Ordered::Object(o)
}

/// The whole answer: CrewAI's object (`results` or `message`, then `nextToken`,
/// `guardrailAction`).
pub fn answer(response: &Value) -> Ordered {
    let results: Vec<Ordered> = response
        .get("retrievalResults")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(result).collect())
        .unwrap_or_default();
    let mut o = Vec::new();
    if results.is_empty() {
        o.push(("message".to_string(), Ordered::Value(json!("No results found for the given query."))));
    } else {
        o.push(("results".to_string(), Ordered::Array(results)));
    }
    for key in ["nextToken", "guardrailAction"] {
        if let Some(v) = response.get(key) {
            o.push((key.to_string(), Ordered::Value(v.clone())));
        }
    }
    Ordered::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_location_type_and_content_type() {
        let cases = [
            (json!({"type": "S3", "s3Location": {"uri": "s3://b/k"}}), "S3", Some("s3://b/k")),
            (json!({"type": "WEB", "webLocation": {"url": "https://w"}}), "WEB", Some("https://w")),
            (json!({"type": "SQL", "sqlLocation": {"query": "SELECT 1"}}), "SQL", Some("SELECT 1")),
            (json!({"type": "ONEDRIVE", "oneDriveLocation": {"url": "https://o"}}), "ONEDRIVE", Some("https://o")),
            (
                json!({"type": "GOOGLEDRIVE", "googleDriveLocation": {"url": "https://g"}}),
                "GOOGLEDRIVE",
                Some("https://g"),
            ),
            (json!({"customDocumentLocation": {"id": "c1"}}), "CustomDocument", Some("c1")),
            (json!({}), "unknown", None),
        ];
        for (loc, ty, uri) in cases {
            assert_eq!(source(&loc), (ty.to_string(), uri.map(str::to_string)), "{loc}");
        }
        let row = json!({"content": {"type": "ROW", "row": [{"columnName": "id", "columnValue": "7", "type": "LONG"}]},
                         "location": {"type": "SQL", "sqlLocation": {"query": "q"}}});
        let v = to_value(&result(&row));
        assert_eq!(v["content"], "");
        assert_eq!(v["content_type"], "ROW");
        assert_eq!(v["row_content"][0]["columnValue"], "7");
        assert!(v.get("score").is_none() && v.get("byte_content").is_none());
        assert_eq!(
            dumps(&answer(&json!({"retrievalResults": []}))),
            "{\n  \"message\": \"No results found for the given query.\"\n}"
        );
    }
}
