//! A request's `query` scored as bleve scores it (formulas in [`super::analysis`]): compiled
//! once into a plan of term scorers, its query norm taken over the whole request, then each
//! document matched and scored.

use serde_json::Value;

use super::Doc;
use super::analysis::{Analysed, Analyzer, Model, TermScorer};
use super::query_string::{Query, matches};

/// What a query needs of its index.
pub(super) struct Index<'a> {
    pub(super) docs: &'a [Doc],
    pub(super) analysed: &'a Analysed,
    /// The definition (its mapping names each field's analyzer and the scoring model).
    pub(super) def: &'a Value,
}

impl Index<'_> {
    fn model(&self) -> Model {
        match self.def.pointer("/params/mapping/scoring_model").and_then(Value::as_str) {
            Some("bm25") => Model::Bm25,
            _ => Model::TfIdf,
        }
    }

    /// The analyzer of `field`: its own, or the nearest `default_analyzer` above it in the type
    /// mappings, or the index's; `standard` for `_all` and unmapped fields.
    fn analyzer(&self, field: Option<&str>) -> Analyzer {
        let mapping = self.def.pointer("/params/mapping");
        let top = mapping.and_then(|m| m.get("default_analyzer")).and_then(Value::as_str).unwrap_or("standard");
        let Some(field) = field else { return Analyzer::Standard };
        let mut found: Option<&str> = None;
        for m in mapping.and_then(|m| m.get("types")).and_then(Value::as_object).into_iter().flatten().map(|(_, m)| m) {
            let mut at = Some(m);
            let mut named = m.get("default_analyzer").and_then(Value::as_str);
            for part in field.split('.') {
                at = at.and_then(|m| m.get("properties")).and_then(|p| p.get(part));
                if let Some(d) = at.and_then(|m| m.get("default_analyzer")).and_then(Value::as_str) {
                    named = Some(d);
                }
            }
            let own = at
                .and_then(|m| m.get("fields"))
                .and_then(Value::as_array)
                .and_then(|fs| fs.iter().find_map(|f| f.get("analyzer").and_then(Value::as_str)));
            if let Some(a) = own.or(named) {
                found = Some(a);
                break;
            }
        }
        Analyzer::named(found.unwrap_or(top)).unwrap_or(Analyzer::Standard)
    }

    fn scorers(&self, field: Option<&str>, analyzer: Analyzer, terms: Vec<String>, boost: f64) -> Vec<TermScorer> {
        let stats = self.analysed.field(self.docs, field, analyzer);
        terms.into_iter().map(|t| TermScorer::new(stats.clone(), t, boost, self.docs.len(), self.model())).collect()
    }

    /// The terms of `field` (under `analyzer`) that `keep` keeps, as scorers: bleve's
    /// multi-term searchers (prefixes, ranges).
    fn expanded(
        &self,
        field: Option<&str>,
        analyzer: Analyzer,
        boost: f64,
        keep: impl Fn(&str) -> bool,
    ) -> Vec<TermScorer> {
        let stats = self.analysed.field(self.docs, field, analyzer);
        let mut terms: Vec<String> = stats.doc_freq.keys().filter(|t| keep(t)).cloned().collect();
        terms.sort();
        self.scorers(field, analyzer, terms, boost)
    }
}

/// A compiled query.
pub(super) enum Plan {
    /// A leaf: matched as the query says; scored by its terms (summed, times `matched / terms`
    /// when `coord`), or a constant when it has none.
    Leaf {
        query: Query,
        scorers: Vec<TermScorer>,
        coord: bool,
        by_terms: bool,
        boost: f64,
    },
    Conj(Vec<Plan>),
    Disj(Vec<Plan>, usize),
    Boolean {
        must: Option<Box<Plan>>,
        should: Option<Box<Plan>>,
        must_not: Option<Box<Plan>>,
    },
}

/// `q` compiled against `index`.
pub(super) fn compile(q: Query, index: &Index<'_>) -> Plan {
    compile_boosted(q, index, 1.0)
}

fn compile_boosted(q: Query, index: &Index<'_>, boost: f64) -> Plan {
    let leaf = |query: Query, scorers: Vec<TermScorer>, coord: bool, by_terms: bool| Plan::Leaf {
        query,
        scorers,
        coord,
        by_terms,
        boost,
    };
    match q {
        Query::Boosted(q, b) => compile_boosted(*q, index, b),
        Query::Conj(qs) => Plan::Conj(qs.into_iter().map(|q| compile(q, index)).collect()),
        Query::Disj(qs, min) => Plan::Disj(qs.into_iter().map(|q| compile(q, index)).collect(), min),
        Query::Boolean { must, should, must_not } => {
            let sub = |q: Option<Box<Query>>| q.map(|q| Box::new(compile(*q, index)));
            Plan::Boolean { must: sub(must), should: sub(should), must_not: sub(must_not) }
        }
        Query::Match { field, text, all } => {
            let analyzer = index.analyzer(field.as_deref());
            let terms = analyzer.terms(&text);
            let s = index.scorers(field.as_deref(), analyzer, terms, boost);
            // Matched by its terms, as bleve does: a text of stop words only matches nothing.
            let by_terms = true;
            leaf(Query::Match { field, text, all }, s, !all, by_terms)
        }
        Query::Phrase { field, text } => {
            let analyzer = index.analyzer(field.as_deref());
            let s = index.scorers(field.as_deref(), analyzer, analyzer.terms(&text), boost);
            leaf(Query::Phrase { field, text }, s, false, false)
        }
        Query::Term { field, term } => {
            let analyzer = index.analyzer(field.as_deref());
            let s = index.scorers(field.as_deref(), analyzer, vec![term.clone()], boost);
            // Matched by the term among the field's analysed terms, as bleve does.
            leaf(Query::Term { field, term }, s, false, true)
        }
        Query::WholeTerm { field, term } => {
            let s = index.scorers(Some(&field), Analyzer::Keyword, vec![term.clone()], boost);
            leaf(Query::WholeTerm { field, term }, s, false, false)
        }
        Query::Prefix { field, prefix } => {
            let analyzer = index.analyzer(field.as_deref());
            let s = index.expanded(field.as_deref(), analyzer, boost, |t| t.starts_with(prefix.as_str()));
            leaf(Query::Prefix { field, prefix }, s, true, false)
        }
        Query::WholePrefix { field, prefix } => {
            let s = index.expanded(Some(&field), Analyzer::Keyword, boost, |t| t.starts_with(prefix.as_str()));
            leaf(Query::WholePrefix { field, prefix }, s, true, false)
        }
        Query::NumRange { field, min, max, incl_min, incl_max } => {
            let within = |t: &str| {
                t.parse::<f64>().is_ok_and(|x| {
                    min.is_none_or(|m| if incl_min { x >= m } else { x > m })
                        && max.is_none_or(|m| if incl_max { x <= m } else { x < m })
                })
            };
            let s = index.expanded(field.as_deref(), Analyzer::Keyword, boost, within);
            leaf(Query::NumRange { field, min, max, incl_min, incl_max }, s, true, false)
        }
        q => leaf(q, Vec::new(), false, false),
    }
}

impl Plan {
    /// Its sum of squared weights (bleve's `Weight`), for the query norm.
    pub(super) fn weight(&self) -> f64 {
        match self {
            Plan::Leaf { scorers, boost, .. } if scorers.is_empty() => boost * boost,
            Plan::Leaf { scorers, .. } => scorers.iter().map(TermScorer::weight).sum(),
            Plan::Conj(ps) | Plan::Disj(ps, _) => ps.iter().map(Plan::weight).sum(),
            Plan::Boolean { must, should, .. } => {
                must.as_ref().map_or(0.0, |p| p.weight()) + should.as_ref().map_or(0.0, |p| p.weight())
            }
        }
    }

    /// Document `i`'s score under `norm`; `None` when it does not match.
    pub(super) fn score(&self, doc: &Doc, i: usize, norm: f64) -> Option<f64> {
        match self {
            Plan::Leaf { query, scorers, coord, by_terms, boost } => {
                let hits: Vec<f64> = scorers.iter().filter_map(|s| s.score(i, norm)).collect();
                let matched = if *by_terms {
                    match query {
                        Query::Match { all: true, .. } => !scorers.is_empty() && hits.len() == scorers.len(),
                        _ => !hits.is_empty(),
                    }
                } else {
                    matches(query, doc)
                };
                if !matched {
                    return None;
                }
                if hits.is_empty() {
                    // A match without a term of its own (match-all, ids, a whole-value term on a
                    // text field): bleve's constant scorer.
                    return Some(boost * boost * norm);
                }
                let sum: f64 = hits.iter().sum();
                Some(if *coord { sum * hits.len() as f64 / scorers.len() as f64 } else { sum })
            }
            Plan::Conj(ps) => ps.iter().map(|p| p.score(doc, i, norm)).sum(),
            Plan::Disj(ps, min) => {
                let hits: Vec<f64> = ps.iter().filter_map(|p| p.score(doc, i, norm)).collect();
                (hits.len() >= (*min).max(1)).then(|| hits.iter().sum::<f64>() * hits.len() as f64 / ps.len() as f64)
            }
            Plan::Boolean { must, should, must_not } => {
                if must_not.as_ref().is_some_and(|p| p.score(doc, i, norm).is_some()) {
                    return None;
                }
                let m = match must {
                    Some(p) => Some(p.score(doc, i, norm)?),
                    None => None,
                };
                let s = match should {
                    Some(p) => match p.score(doc, i, norm) {
                        Some(s) => Some(s),
                        // Should clauses only score beside a must; alone, one must match.
                        None if must.is_none() => return None,
                        None => None,
                    },
                    None => None,
                };
                Some(m.unwrap_or(0.0) + s.unwrap_or(0.0))
            }
        }
    }
}

/// The query norm of a plan: `1 / sqrt(weight)` (1 for a weightless one).
pub(super) fn query_norm(plan: &Plan) -> f64 {
    let w = plan.weight();
    if w > 0.0 { 1.0 / w.sqrt() } else { 1.0 }
}
