//! Queries: a subset of the bleve query language (the JSON query objects and the
//! query-string syntax), parsed and matched against a document's stored fields; used for a
//! search request's `query` and for kNN prefilters.

use serde_json::Value;

use super::Doc;

/// A parsed bleve query (prefilter or `query`).
pub(super) enum Query {
    All,
    None,
    Term {
        field: Option<String>,
        term: String,
    },
    Match {
        field: Option<String>,
        text: String,
        all: bool,
    },
    Phrase {
        field: Option<String>,
        text: String,
    },
    Prefix {
        field: Option<String>,
        prefix: String,
    },
    NumRange {
        field: Option<String>,
        min: Option<f64>,
        max: Option<f64>,
        incl_min: bool,
        incl_max: bool,
    },
    TermRange {
        field: Option<String>,
        min: Option<String>,
        max: Option<String>,
        incl_min: bool,
        incl_max: bool,
    },
    Bool {
        field: Option<String>,
        value: bool,
    },
    Ids(Vec<String>),
    /// A term on a field the index analyses with the `keyword` analyzer: the whole value.
    WholeTerm {
        field: String,
        term: String,
    },
    /// A prefix on such a field: of the whole value.
    WholePrefix {
        field: String,
        prefix: String,
    },
    Conj(Vec<Query>),
    Disj(Vec<Query>, usize),
    Boolean {
        must: Option<Box<Query>>,
        should: Option<Box<Query>>,
        must_not: Option<Box<Query>>,
    },
    /// A leaf query with a `boost` (bleve scales a leaf's score by it; compound queries ignore
    /// theirs).
    Boosted(Box<Query>, f64),
}

pub(super) fn parse_query(v: &Value) -> Result<Query, String> {
    let q = parse_unboosted(v)?;
    Ok(match (v.get("boost").and_then(Value::as_f64), q) {
        (_, q @ (Query::Conj(_) | Query::Disj(..) | Query::Boolean { .. })) => q,
        (Some(b), q) => Query::Boosted(Box::new(q), b),
        (None, q) => q,
    })
}

fn parse_unboosted(v: &Value) -> Result<Query, String> {
    let Some(o) = v.as_object() else { return Err("unknown query type".into()) };
    let field = o.get("field").and_then(Value::as_str).map(str::to_string);
    let list = |key: &str| -> Result<Vec<Query>, String> {
        o.get(key).and_then(Value::as_array).map_or(Ok(vec![]), |a| a.iter().map(parse_query).collect())
    };
    // Same precedence as bleve's ParseQuery.
    if o.contains_key("match_all") {
        return Ok(Query::All);
    }
    if o.contains_key("match_none") {
        return Ok(Query::None);
    }
    if o.contains_key("conjuncts") {
        return Ok(Query::Conj(list("conjuncts")?));
    }
    if o.contains_key("disjuncts") {
        let min = o.get("min").and_then(Value::as_u64).unwrap_or(0) as usize;
        return Ok(Query::Disj(list("disjuncts")?, min));
    }
    if o.contains_key("must") || o.contains_key("should") || o.contains_key("must_not") {
        let sub = |key: &str| -> Result<Option<Box<Query>>, String> {
            o.get(key).filter(|v| !v.is_null()).map(|v| parse_query(v).map(Box::new)).transpose()
        };
        return Ok(Query::Boolean { must: sub("must")?, should: sub("should")?, must_not: sub("must_not")? });
    }
    if let Some(t) = o.get("term") {
        return Ok(Query::Term { field, term: t.as_str().ok_or("term must be a string")?.to_string() });
    }
    if let Some(t) = o.get("match") {
        let all = o.get("operator").and_then(Value::as_str).is_some_and(|op| op.eq_ignore_ascii_case("and"));
        return Ok(Query::Match { field, text: t.as_str().ok_or("match must be a string")?.to_string(), all });
    }
    if let Some(t) = o.get("match_phrase") {
        return Ok(Query::Phrase { field, text: t.as_str().ok_or("match_phrase must be a string")?.to_string() });
    }
    if let Some(t) = o.get("prefix") {
        return Ok(Query::Prefix { field, prefix: t.as_str().ok_or("prefix must be a string")?.to_string() });
    }
    if o.get("min").is_some_and(Value::is_number) || o.get("max").is_some_and(Value::is_number) {
        return Ok(Query::NumRange {
            field,
            min: o.get("min").and_then(Value::as_f64),
            max: o.get("max").and_then(Value::as_f64),
            incl_min: o.get("inclusive_min").and_then(Value::as_bool).unwrap_or(true),
            incl_max: o.get("inclusive_max").and_then(Value::as_bool).unwrap_or(false),
        });
    }
    if o.get("min").is_some_and(Value::is_string) || o.get("max").is_some_and(Value::is_string) {
        return Ok(Query::TermRange {
            field,
            min: o.get("min").and_then(Value::as_str).map(str::to_string),
            max: o.get("max").and_then(Value::as_str).map(str::to_string),
            incl_min: o.get("inclusive_min").and_then(Value::as_bool).unwrap_or(true),
            incl_max: o.get("inclusive_max").and_then(Value::as_bool).unwrap_or(false),
        });
    }
    if let Some(b) = o.get("bool") {
        return Ok(Query::Bool { field, value: b.as_bool().ok_or("bool must be a boolean")? });
    }
    if let Some(ids) = o.get("ids") {
        let ids = ids.as_array().ok_or("ids must be an array")?;
        return Ok(Query::Ids(ids.iter().filter_map(Value::as_str).map(str::to_string).collect()));
    }
    if let Some(q) = o.get("query") {
        return parse_query_string(q.as_str().ok_or("query must be a string")?);
    }
    for real_but_unsupported in
        ["wildcard", "regexp", "terms", "start", "end", "location", "top_left", "polygon_points"]
    {
        if o.contains_key(real_but_unsupported) {
            return Err(format!("fake_couchbase does not implement the `{real_but_unsupported}` query"));
        }
    }
    Err("unknown query type".into())
}

/// A query-string query (bleve's syntax, the common part): whitespace-separated clauses, each
/// `+` (must), `-` (must not) or plain (should: at least one must match when there is no must);
/// a clause is `field:value`, `field:"a phrase"`, `field:>N` / `>=N` / `<N` / `<=N`, or a bare
/// word matched against every field.
fn parse_query_string(text: &str) -> Result<Query, String> {
    let mut clauses = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in text.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                cur.push(c);
            }
            c if c.is_whitespace() && !quoted => {
                if !cur.is_empty() {
                    clauses.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if quoted {
        return Err(format!("syntax error: unterminated quote in query string {text:?}"));
    }
    if !cur.is_empty() {
        clauses.push(cur);
    }
    if clauses.is_empty() {
        return Err("syntax error: empty query string".into());
    }
    let (mut must, mut should, mut not) = (Vec::new(), Vec::new(), Vec::new());
    for clause in clauses {
        let (list, body) = match clause.strip_prefix('+') {
            Some(rest) => (&mut must, rest),
            None => match clause.strip_prefix('-') {
                Some(rest) => (&mut not, rest),
                None => (&mut should, clause.as_str()),
            },
        };
        let (field, value) = match body.split_once(':') {
            Some((f, v)) if !f.is_empty() => (Some(f.to_string()), v),
            _ => (None, body),
        };
        if value.is_empty() {
            return Err(format!("syntax error: clause {clause:?} has no value"));
        }
        let range = |op: &str, rest: &str| -> Result<Query, String> {
            let n: f64 = rest.parse().map_err(|_| format!("syntax error: {rest:?} is not a number"))?;
            let (min, max, incl_min, incl_max) = match op {
                ">" => (Some(n), None, false, false),
                ">=" => (Some(n), None, true, false),
                "<" => (None, Some(n), true, false),
                _ => (None, Some(n), true, true),
            };
            Ok(Query::NumRange { field: field.clone(), min, max, incl_min, incl_max })
        };
        let q = if let Some(rest) = value.strip_prefix(">=") {
            range(">=", rest)?
        } else if let Some(rest) = value.strip_prefix("<=") {
            range("<=", rest)?
        } else if let Some(rest) = value.strip_prefix('>') {
            range(">", rest)?
        } else if let Some(rest) = value.strip_prefix('<') {
            range("<", rest)?
        } else if value.len() >= 2 && value.starts_with('"') && value.ends_with('"') {
            Query::Phrase { field: field.clone(), text: value[1..value.len() - 1].to_string() }
        } else {
            Query::Match { field: field.clone(), text: value.to_string(), all: false }
        };
        list.push(q);
    }
    let has_must = !must.is_empty();
    Ok(Query::Boolean {
        must: has_must.then(|| Box::new(Query::Conj(must))),
        // With a must clause, should clauses only score; without one, one must match.
        should: (!has_must && !should.is_empty()).then(|| Box::new(Query::Disj(should, 1))),
        must_not: (!not.is_empty()).then(|| Box::new(Query::Disj(not, 1))),
    })
}

/// The standard analyzer, roughly: lowercase words.
fn tokens(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric()).filter(|t| !t.is_empty()).map(str::to_lowercase).collect()
}

/// The values a field path names in a document (dotted paths reach into objects; arrays
/// contribute each element); no field means every stored field (`_all`).
pub(super) fn values<'a>(doc: &'a Doc, field: &Option<String>) -> Vec<&'a Value> {
    fn flatten<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
        match v {
            Value::Array(a) => a.iter().for_each(|x| flatten(x, out)),
            Value::Object(o) => o.values().for_each(|x| flatten(x, out)),
            other => out.push(other),
        }
    }
    let mut out = Vec::new();
    match field {
        None => doc.fields.values().for_each(|v| flatten(v, &mut out)),
        Some(path) => {
            let mut parts = path.split('.');
            let mut cur = parts.next().and_then(|p| doc.fields.get(p));
            for p in parts {
                cur = cur.and_then(|v| v.get(p));
            }
            if let Some(v) = cur {
                flatten(v, &mut out);
            }
        }
    }
    out
}

fn text_tokens(doc: &Doc, field: &Option<String>) -> Vec<String> {
    values(doc, field).into_iter().filter_map(Value::as_str).flat_map(tokens).collect()
}

/// `q` as an index analyses it: terms and prefixes on a field under one of `keyword` (the paths
/// the index maps with the `keyword` analyzer) compare whole values, not words.
pub(super) fn analysed(q: Query, keyword: &[String]) -> Query {
    let under = |f: &Option<String>| {
        f.as_ref().is_some_and(|f| keyword.iter().any(|k| f == k || f.starts_with(&format!("{k}."))))
    };
    let all = |qs: Vec<Query>| qs.into_iter().map(|q| analysed(q, keyword)).collect();
    let boxed = |q: Option<Box<Query>>| q.map(|q| Box::new(analysed(*q, keyword)));
    match q {
        Query::Term { field, term } if under(&field) => Query::WholeTerm { field: field.unwrap_or_default(), term },
        Query::Prefix { field, prefix } if under(&field) => {
            Query::WholePrefix { field: field.unwrap_or_default(), prefix }
        }
        Query::Conj(qs) => Query::Conj(all(qs)),
        Query::Disj(qs, min) => Query::Disj(all(qs), min),
        Query::Boosted(q, b) => Query::Boosted(Box::new(analysed(*q, keyword)), b),
        Query::Boolean { must, should, must_not } => {
            Query::Boolean { must: boxed(must), should: boxed(should), must_not: boxed(must_not) }
        }
        q => q,
    }
}

pub(super) fn matches(q: &Query, doc: &Doc) -> bool {
    match q {
        Query::WholeTerm { field, term } => {
            values(doc, &Some(field.clone())).iter().any(|v| v.as_str() == Some(term.as_str()))
        }
        Query::WholePrefix { field, prefix } => {
            values(doc, &Some(field.clone())).iter().any(|v| v.as_str().is_some_and(|s| s.starts_with(prefix.as_str())))
        }
        Query::All => true,
        Query::None => false,
        Query::Term { field, term } => {
            values(doc, field).iter().any(|v| v.as_str() == Some(term.as_str()))
                || text_tokens(doc, field).iter().any(|t| t == term)
        }
        Query::Match { field, text, all } => {
            let have = text_tokens(doc, field);
            let want = tokens(text);
            if *all {
                !want.is_empty() && want.iter().all(|w| have.contains(w))
            } else {
                want.iter().any(|w| have.contains(w))
            }
        }
        Query::Phrase { field, text } => {
            let want = tokens(text);
            values(doc, field)
                .into_iter()
                .filter_map(Value::as_str)
                .any(|s| !want.is_empty() && tokens(s).windows(want.len()).any(|w| w == want.as_slice()))
        }
        Query::Prefix { field, prefix } => text_tokens(doc, field).iter().any(|t| t.starts_with(prefix.as_str())),
        Query::NumRange { field, min, max, incl_min, incl_max } => {
            values(doc, field).into_iter().filter_map(Value::as_f64).any(|x| {
                min.is_none_or(|m| if *incl_min { x >= m } else { x > m })
                    && max.is_none_or(|m| if *incl_max { x <= m } else { x < m })
            })
        }
        Query::TermRange { field, min, max, incl_min, incl_max } => text_tokens(doc, field).iter().any(|t| {
            min.as_ref().is_none_or(|m| if *incl_min { t >= m } else { t > m })
                && max.as_ref().is_none_or(|m| if *incl_max { t <= m } else { t < m })
        }),
        Query::Bool { field, value } => values(doc, field).iter().any(|v| v.as_bool() == Some(*value)),
        Query::Ids(ids) => ids.contains(&doc.id),
        Query::Boosted(q, _) => matches(q, doc),
        Query::Conj(qs) => qs.iter().all(|q| matches(q, doc)),
        Query::Disj(qs, min) => qs.iter().filter(|q| matches(q, doc)).count() >= (*min).max(1),
        Query::Boolean { must, should, must_not } => {
            must.as_ref().is_none_or(|q| matches(q, doc))
                && should.as_ref().is_none_or(|q| matches(q, doc))
                && must_not.as_ref().is_none_or(|q| !matches(q, doc))
        }
    }
}
