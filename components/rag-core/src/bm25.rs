//! BM25 (k1 = 1.2, b = 0.75): the keyword leg beside the vectors, for wording an embedding
//! misses (names, flags, error codes).
//!
//! Terms are lower-cased Unicode words; runs of CJK characters, which have no spaces, become
//! character bigrams (and single characters for a lone one).

use std::collections::HashMap;

use unicode_segmentation::UnicodeSegmentation;

const K1: f32 = 1.2;
const B: f32 = 0.75;

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // Hiragana, Katakana
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF) // CJK compatibility ideographs
}

/// The terms of a text.
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        // The next run of CJK or of other characters.
        let cjk = rest.chars().next().is_some_and(is_cjk);
        let end = rest.char_indices().find(|&(_, c)| is_cjk(c) != cjk).map_or(rest.len(), |(i, _)| i);
        let (run, tail) = rest.split_at(end);
        rest = tail;
        if cjk {
            let chars: Vec<char> = run.chars().collect();
            if chars.len() == 1 {
                out.push(run.to_string());
            } else {
                out.extend(chars.windows(2).map(|w| w.iter().collect::<String>()));
            }
        } else {
            out.extend(run.unicode_words().map(str::to_lowercase));
        }
    }
    out
}

/// What a term adds to a document's BM25 score: the term occurs `f` times in the document of
/// `len` terms, and in `df` of the `n` documents whose mean length is `avg`. The one formula for
/// every corpus, wherever its statistics come from (this index, or a Couchbase corpus's
/// manifest and Search service).
pub fn term_score(f: f32, len: f32, df: f32, n: f32, avg: f32) -> f32 {
    let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
    idf * f * (K1 + 1.0) / (f + K1 * (1.0 - B + B * len / avg))
}

/// The mean length BM25 normalises by: the terms of `n` documents over their number, at least 1.
pub fn mean_length(total: u64, n: u64) -> f32 {
    if n == 0 { 1.0 } else { (total as f32 / n as f32).max(1.0) }
}

/// A BM25 index over texts known by position: for each term, the documents that hold it
/// (postings), so that a query touches only the documents sharing a term with it.
#[derive(Default)]
pub struct Bm25 {
    /// Term → (document, term frequency), documents in ascending order.
    postings: HashMap<String, Vec<(u32, u32)>>,
    lengths: Vec<u32>,
    total_len: u64,
}

impl Bm25 {
    /// Indexes `texts`; text i is document i.
    pub fn build<'a>(texts: impl IntoIterator<Item = &'a str>) -> Bm25 {
        let mut ix = Bm25::default();
        for (doc, t) in texts.into_iter().enumerate() {
            let ts = terms(t);
            let mut tf: HashMap<&str, u32> = HashMap::new();
            for term in &ts {
                *tf.entry(term.as_str()).or_insert(0) += 1;
            }
            for (term, f) in tf {
                ix.postings.entry(term.to_string()).or_default().push((doc as u32, f));
            }
            ix.lengths.push(ts.len() as u32);
            ix.total_len += ts.len() as u64;
        }
        ix
    }

    /// The `k` best documents for `query` among those `allowed`, as (position, BM25 score),
    /// best first; documents sharing no term with the query are left out.
    pub fn search(&self, query: &str, k: usize, allowed: Option<&dyn Fn(usize) -> bool>) -> Vec<(usize, f32)> {
        self.search_until(query, k, allowed, &|| false).unwrap_or_default()
    }

    /// [`Bm25::search`], given up (`None`) as soon as `stop` says so: it is asked before each
    /// query term, so that a query of many terms costs no more than its caller allows.
    pub fn search_until(
        &self,
        query: &str,
        k: usize,
        allowed: Option<&dyn Fn(usize) -> bool>,
        stop: &dyn Fn() -> bool,
    ) -> Option<Vec<(usize, f32)>> {
        let n = self.lengths.len() as f32;
        if n == 0.0 {
            return Some(Vec::new());
        }
        let avg = mean_length(self.total_len, self.lengths.len() as u64);
        let mut q = terms(query);
        q.sort();
        q.dedup();
        // Each document's score, summed term by term in the query's (sorted) order.
        let mut scores = vec![0f32; self.lengths.len()];
        for t in &q {
            if stop() {
                return None;
            }
            let Some(postings) = self.postings.get(t) else { continue };
            let df = postings.len() as f32;
            for &(doc, f) in postings {
                scores[doc as usize] += term_score(f as f32, self.lengths[doc as usize] as f32, df, n, avg);
            }
        }
        let scored: Vec<(usize, f32)> =
            scores.into_iter().enumerate().filter(|&(i, s)| s > 0.0 && allowed.is_none_or(|f| f(i))).collect();
        Some(crate::score::top_k(scored, k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_split_words_and_cjk() {
        assert_eq!(terms("Rclone's --fast-list FLAG"), ["rclone's", "fast", "list", "flag"]);
        assert_eq!(terms("所有权规则"), ["所有", "有权", "权规", "规则"]);
        assert_eq!(terms("Rust的所有权"), ["rust", "的所", "所有", "有权"]);
    }

    /// A search told to stop gives up before its next term.
    #[test]
    fn a_search_told_to_stop_gives_up() {
        let ix = Bm25::build(["alpha beta", "beta gamma"]);
        let asked = std::cell::Cell::new(0);
        let stop = || {
            asked.set(asked.get() + 1);
            asked.get() > 1
        };
        assert_eq!(ix.search_until("alpha beta gamma", 3, None, &stop), None);
        assert_eq!(asked.get(), 2, "asked before the first and the second term");
        assert_eq!(ix.search_until("alpha beta gamma", 3, None, &|| false).map(|h| h.len()), Some(2));
    }

    #[test]
    fn rare_terms_rank_first() {
        let docs = [
            "the sync command makes the destination identical to the source",
            "the copy command copies files from source to destination",
            "use --fast-list to reduce transactions on bucket based remotes",
        ];
        let ix = Bm25::build(docs);
        assert_eq!(ix.search("fast-list transactions", 3, None)[0].0, 2);
        assert_eq!(ix.search("identical destination", 3, None)[0].0, 0);
        assert!(ix.search("zebra", 3, None).is_empty());
        let not_two = |i: usize| i != 2;
        assert!(ix.search("fast-list", 3, Some(&not_two)).is_empty());
    }

    #[test]
    fn chinese_queries_match_chinese_text() {
        let ix = Bm25::build(["所有权是 Rust 最独特的功能", "结构体让你命名和包装多个相关的值"]);
        assert_eq!(ix.search("什么是所有权", 2, None)[0].0, 0);
        assert_eq!(ix.search("结构体", 2, None)[0].0, 1);
    }
}
