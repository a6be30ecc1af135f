//! Text analysis and scoring as the Search service (bleve) does them, for the queries the fake
//! answers: the analyzers a definition names (`standard`, `cjk`, `keyword`), each field's
//! statistics, and bleve's two scoring models (`tf-idf`, the default, and `bm25`, Couchbase
//! 8.0's `scoring_model`), so that a keyword search ranks documents as a real cluster would.
//!
//! The formulas are bleve's (`search/scorer/scorer_term.go`, `search/searcher/search_term.go`):
//! for a term in a field, `tf = sqrt(freq)`, `norm = 1 / sqrt(field length)`;
//! tf-idf: `idf = 1 + ln(docs / (docs with the term + 1))`, score `tf * norm * idf`;
//! bm25 (k1 1.2, b 0.75): `idf = ln(1 + (docs - n + 0.5) / (n + 0.5))`, score
//! `idf * tf * k1 / (tf + k1 * (1 - b + b * length / avg))` where bleve's `avg` is
//! `ceil(distinct terms of the field / docs)`; either score then times the query weight
//! `boost * idf * queryNorm`, with `queryNorm = 1 / sqrt(sum of (boost * idf)^2)` over the
//! whole request's terms. A disjunction sums its matches' scores times `matched / clauses`
//! (coord); a conjunction sums. Numeric ranges are scored as bleve's multi-term searcher scores
//! them, over the distinct values in range (bleve enumerates prefix-coded terms; the values
//! are the finest of them).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;
use unicode_segmentation::UnicodeSegmentation;

use super::Doc;
use super::query_string::values;

/// bleve's `stop_en` list (Snowball's English stop words), used by the `standard` analyzer.
#[rustfmt::skip]
const STOP_EN: &[&str] = &[
    "i", "me", "my", "myself", "we", "our", "ours", "ourselves", "you", "your", "yours", "yourself", "yourselves",
    "he", "him", "his", "himself", "she", "her", "hers", "herself", "it", "its", "itself", "they", "them", "their",
    "theirs", "themselves", "what", "which", "who", "whom", "this", "that", "these", "those", "am", "is", "are",
    "was", "were", "be", "been", "being", "have", "has", "had", "having", "do", "does", "did", "doing", "would",
    "should", "could", "ought", "i'm", "you're", "he's", "she's", "it's", "we're", "they're", "i've", "you've",
    "we've", "they've", "i'd", "you'd", "he'd", "she'd", "we'd", "they'd", "i'll", "you'll", "he'll", "she'll",
    "we'll", "they'll", "isn't", "aren't", "wasn't", "weren't", "hasn't", "haven't", "hadn't", "doesn't", "don't",
    "didn't", "won't", "wouldn't", "shan't", "shouldn't", "can't", "cannot", "couldn't", "mustn't", "let's", "that's",
    "who's", "what's", "here's", "there's", "when's", "where's", "why's", "how's", "a", "an", "the", "and", "but",
    "if", "or", "because", "as", "until", "while", "of", "at", "by", "for", "with", "about", "against", "between",
    "into", "through", "during", "before", "after", "above", "below", "to", "from", "up", "down", "in", "out", "on",
    "off", "over", "under", "again", "further", "then", "once", "here", "there", "when", "where", "why", "how", "all",
    "any", "both", "each", "few", "more", "most", "other", "some", "such", "no", "nor", "not", "only", "own", "same",
    "so", "than", "too", "very",
];

/// An analyzer a definition may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Analyzer {
    /// Unicode words, lower-cased, English stop words removed.
    Standard,
    /// Unicode words, full-width forms narrowed, lower-cased, runs of ideographs as bigrams
    /// (a lone one as itself).
    Cjk,
    /// The whole value, one term.
    Keyword,
}

impl Analyzer {
    /// The analyzer called `name`; `None` for one the fake does not know.
    pub(super) fn named(name: &str) -> Option<Analyzer> {
        match name {
            "standard" => Some(Analyzer::Standard),
            "cjk" => Some(Analyzer::Cjk),
            "keyword" => Some(Analyzer::Keyword),
            _ => None,
        }
    }

    /// The terms of `text`.
    pub(super) fn terms(self, text: &str) -> Vec<String> {
        match self {
            Analyzer::Keyword => vec![text.to_string()],
            Analyzer::Standard => {
                text.unicode_words().map(str::to_lowercase).filter(|w| !STOP_EN.contains(&w.as_str())).collect()
            }
            Analyzer::Cjk => cjk_terms(text),
        }
    }
}

/// Hiragana, Katakana and Han: what bleve's unicode tokenizer types as ideographic.
fn ideographic(c: char) -> bool {
    matches!(c as u32, 0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x2FFFF)
}

/// Full-width ASCII narrowed (bleve's `cjk_width`).
fn narrowed(c: char) -> char {
    match c as u32 {
        0xFF01..=0xFF5E => char::from_u32(c as u32 - 0xFEE0).unwrap_or(c),
        _ => c,
    }
}

/// The `cjk` analyzer: bleve's `cjk_bigram` over unicode words, ideographs adjacent in the text
/// paired, a lone one kept.
fn cjk_terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    // The ideographs not yet paired: (end offset, char) of the last one.
    let mut last: Option<(usize, char)> = None;
    let mut lone = true;
    let flush = |last: &mut Option<(usize, char)>, lone: bool, out: &mut Vec<String>| {
        if let Some((_, c)) = last.take()
            && lone
        {
            out.push(c.to_string());
        }
    };
    for (at, word) in text.unicode_word_indices() {
        if word.chars().all(ideographic) {
            for (i, c) in word.char_indices() {
                let start = at + i;
                match last {
                    Some((end, prev)) if end == start => {
                        out.push([prev, c].iter().collect());
                        lone = false;
                    }
                    _ => {
                        flush(&mut last, lone, &mut out);
                        lone = true;
                    }
                }
                last = Some((start + c.len_utf8(), c));
            }
        } else {
            flush(&mut last, lone, &mut out);
            out.push(word.chars().map(narrowed).collect::<String>().to_lowercase());
        }
    }
    flush(&mut last, lone, &mut out);
    out
}

/// How a definition scores: its mapping's `scoring_model`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Model {
    TfIdf,
    Bm25,
}

/// What the index knows of one field under one analyzer.
#[derive(Debug, Default)]
pub(super) struct FieldStats {
    /// Per document (in index order): its term frequencies and field length, when it has the field.
    pub(super) docs: Vec<Option<(HashMap<String, u32>, u32)>>,
    /// Term -> documents holding it.
    pub(super) doc_freq: HashMap<String, u32>,
}

impl FieldStats {
    fn build(docs: &[Doc], field: Option<&str>, analyzer: Analyzer) -> FieldStats {
        let mut stats = FieldStats::default();
        for d in docs {
            let texts = field_texts(d, field);
            if texts.is_empty() {
                stats.docs.push(None);
                continue;
            }
            let mut tf: HashMap<String, u32> = HashMap::new();
            let mut length = 0;
            for t in texts {
                for term in analyzer.terms(&t) {
                    length += 1;
                    *tf.entry(term).or_insert(0) += 1;
                }
            }
            for term in tf.keys() {
                *stats.doc_freq.entry(term.clone()).or_insert(0) += 1;
            }
            stats.docs.push(Some((tf, length)));
        }
        stats
    }
}

/// The text values of `field` in a document (every string field without one: `_all`); numbers
/// and booleans as their JSON text, for keyword fields that hold them.
pub(super) fn field_texts(doc: &Doc, field: Option<&str>) -> Vec<String> {
    values(doc, &field.map(str::to_string))
        .into_iter()
        .filter_map(|v| match v {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            other => Some(other.to_string()),
        })
        .collect()
}

/// A field (`None`: `_all`) under an analyzer.
type FieldKey = (Option<String>, Analyzer);

/// An index's analysed fields, built the first time a query needs them and kept with the
/// documents they were built from.
#[derive(Debug, Default)]
pub(super) struct Analysed {
    fields: Mutex<HashMap<FieldKey, Arc<FieldStats>>>,
}

impl Analysed {
    /// The statistics of `field` under `analyzer` over `docs`.
    pub(super) fn field(&self, docs: &[Doc], field: Option<&str>, analyzer: Analyzer) -> Arc<FieldStats> {
        let key = (field.map(str::to_string), analyzer);
        if let Some(s) = self.fields.lock().get(&key) {
            return s.clone();
        }
        let built = Arc::new(FieldStats::build(docs, field, analyzer));
        self.fields.lock().insert(key, built.clone());
        built
    }
}

/// One term of a request, scored against the documents.
pub(super) struct TermScorer {
    stats: Arc<FieldStats>,
    term: String,
    idf: f64,
    boost: f64,
    model: Model,
    avg: f64,
}

impl TermScorer {
    /// `term` in the field `stats` describes, over `docs` documents.
    pub(super) fn new(stats: Arc<FieldStats>, term: String, boost: f64, docs: usize, model: Model) -> TermScorer {
        let n = f64::from(stats.doc_freq.get(&term).copied().unwrap_or(0));
        let total = docs as f64;
        let (idf, avg) = match model {
            Model::TfIdf => (1.0 + (total / (n + 1.0)).ln(), 0.0),
            Model::Bm25 => {
                let cardinality = stats.doc_freq.len() as f64;
                let avg = if total > 0.0 { (cardinality / total).ceil() } else { 0.0 };
                ((1.0 + (total - n + 0.5) / (n + 0.5)).ln(), avg)
            }
        };
        TermScorer { stats, term, idf, boost, model, avg }
    }

    /// What it adds to the request's sum of squared weights.
    pub(super) fn weight(&self) -> f64 {
        (self.boost * self.idf).powi(2)
    }

    /// Its score in document `i` under `query_norm`; `None` when the document lacks the term.
    pub(super) fn score(&self, i: usize, query_norm: f64) -> Option<f64> {
        let (tf, length) = self.stats.docs.get(i)?.as_ref()?;
        let freq = *tf.get(&self.term)?;
        let tf = f64::from(freq).sqrt();
        let length = f64::from((*length).max(1));
        let norm = 1.0 / length.sqrt();
        let field = match self.model {
            Model::Bm25 if self.avg > 0.0 => {
                let (k1, b) = (1.2, 0.75);
                self.idf * (tf * k1) / (tf + k1 * (1.0 - b + b * length / self.avg))
            }
            _ => tf * norm * self.idf,
        };
        Some(field * self.boost * self.idf * query_norm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_drops_english_stop_words_and_keeps_unicode_words() {
        assert_eq!(Analyzer::Standard.terms("The --bwlimit of rclone's Sync"), ["bwlimit", "rclone's", "sync"]);
    }

    #[test]
    fn cjk_pairs_adjacent_ideographs_and_keeps_a_lone_one() {
        assert_eq!(Analyzer::Cjk.terms("使用 Cargo 构建项目"), ["使用", "cargo", "构建", "建项", "项目"]);
        assert_eq!(Analyzer::Cjk.terms("包 和 crate"), ["包", "和", "crate"]);
        // No stop words: `the` stays, as in the local corpus's BM25.
        assert_eq!(Analyzer::Cjk.terms("The ＡＰＩ"), ["the", "api"]);
    }
}
