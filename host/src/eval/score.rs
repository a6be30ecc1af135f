//! Scoring a retriever's fragments against labelled questions: section recall@k, chapter
//! recall@k, all-found@10 for multi-section questions, MRR@10; and the table and JSON that show
//! them. `quarry eval` and `make eval` both score here.

use serde_json::{Value, json};

use super::questions::{Question, Section};

/// The k of section recall@k.
pub const SECTION_KS: [usize; 4] = [1, 3, 5, 10];
/// The k of chapter recall@k.
pub const CHAPTER_KS: [usize; 2] = [1, 3];
/// Fragments looked at for all-found and MRR.
pub const DEPTH: usize = 10;

/// One retrieved fragment as the scorer sees it: where it lies in the manual.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fragment {
    /// Heading titles from the top down (the first is its chapter).
    pub path: Vec<String>,
    /// First and last line (inclusive), when the tool says.
    pub lines: Option<(usize, usize)>,
}

impl Section {
    /// Whether `f` lies in this section's subtree: by lines when both have them (titles may be
    /// written differently), else by heading path.
    pub fn holds(&self, f: &Fragment) -> bool {
        match (self.lines, f.lines) {
            (Some(s), Some(l)) => l.0 <= s.1 && s.0 <= l.1,
            _ => !self.path.is_empty() && f.path.starts_with(&self.path),
        }
    }
}

/// Sums over the questions, for one retriever.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    /// Questions scored.
    pub questions: usize,
    /// Of them, multi-section questions.
    pub multi: usize,
    /// Questions with a gold or acceptable fragment in the top k, per [`SECTION_KS`].
    pub section: [usize; 4],
    /// Questions with a gold chapter among the first k distinct chapters, per [`CHAPTER_KS`].
    pub chapter: [usize; 2],
    /// Multi-section questions with every gold section in the top [`DEPTH`].
    pub all_found: usize,
    /// Sum of 1/rank of the first right fragment in the top [`DEPTH`].
    pub reciprocal_ranks: f64,
}

/// Chapter titles in order of first appearance across `lists`: a router's ranking first, then
/// the chapters of the fragments ([`chapters_of`]).
pub fn chapter_order<'a>(lists: impl IntoIterator<Item = &'a [String]>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in lists.into_iter().flatten() {
        if !out.contains(c) {
            out.push(c.clone());
        }
    }
    out
}

/// The chapters (first titles) of `fragments`, in order of first appearance.
pub fn chapters_of(fragments: &[Fragment]) -> Vec<String> {
    let firsts: Vec<String> = fragments.iter().filter_map(|f| f.path.first().cloned()).collect();
    chapter_order([firsts.as_slice()])
}

impl Tally {
    /// Scores the fragments returned for `q`, best first, and the chapters the retriever
    /// ranks, best first (a router's choice, else [`chapters_of`] the fragments).
    pub fn add(&mut self, q: &Question, fragments: &[Fragment], chapters: &[String]) {
        let right = |f: &Fragment| q.gold.iter().chain(&q.acceptable).any(|s| s.holds(f));
        let first = fragments.iter().take(DEPTH).position(right);
        self.questions += 1;
        for (slot, &k) in SECTION_KS.iter().enumerate() {
            if first.is_some_and(|r| r < k) {
                self.section[slot] += 1;
            }
        }
        for (slot, &k) in CHAPTER_KS.iter().enumerate() {
            if chapters.iter().take(k).any(|c| q.chapters.contains(c)) {
                self.chapter[slot] += 1;
            }
        }
        if q.multi {
            self.multi += 1;
            let top = &fragments[..DEPTH.min(fragments.len())];
            if q.gold.iter().all(|s| top.iter().any(|f| s.holds(f))) {
                self.all_found += 1;
            }
        }
        if let Some(r) = first {
            self.reciprocal_ranks += 1.0 / (r + 1) as f64;
        }
    }

    fn share(&self, n: usize) -> f64 {
        if self.questions == 0 { 0.0 } else { n as f64 / self.questions as f64 }
    }

    /// All-found@10 over the multi-section questions; none without any.
    pub fn all_found_share(&self) -> Option<f64> {
        (self.multi > 0).then(|| self.all_found as f64 / self.multi as f64)
    }

    /// Mean reciprocal rank of the first right fragment (0 when none is in the top 10).
    pub fn mrr(&self) -> f64 {
        if self.questions == 0 { 0.0 } else { self.reciprocal_ranks / self.questions as f64 }
    }
}

/// One retriever's scores and, when measured, its latency (p50, p99 in ms).
#[derive(Clone, Debug)]
pub struct Row {
    /// The retriever's name.
    pub name: String,
    /// Its scores.
    pub tally: Tally,
    /// p50 and p99 of its calls, in milliseconds.
    pub latency: Option<(f64, f64)>,
}

/// The `p` quantile (0..=1) of `ms`, nearest rank; 0 for none.
pub fn percentile(ms: &[f64], p: f64) -> f64 {
    let mut sorted = ms.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n => sorted[((n as f64 - 1.0) * p).round() as usize],
    }
}

/// The rows as a Markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| retriever | sec@1 | sec@3 | sec@5 | sec@10 | chap@1 | chap@3 | all-found@10 | MRR@10 | p50 ms | p99 ms |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let t = &r.tally;
        let f = |x: f64| format!("{x:.2}");
        let (p50, p99) = r.latency.map_or(("-".into(), "-".into()), |(a, b)| (format!("{a:.1}"), format!("{b:.1}")));
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {p50} | {p99} |\n",
            r.name,
            f(t.share(t.section[0])),
            f(t.share(t.section[1])),
            f(t.share(t.section[2])),
            f(t.share(t.section[3])),
            f(t.share(t.chapter[0])),
            f(t.share(t.chapter[1])),
            t.all_found_share().map_or("-".into(), f),
            f(t.mrr()),
        ));
    }
    out
}

/// The rows as JSON: recall per k, all-found, MRR and latency per retriever.
pub fn to_json(rows: &[Row]) -> Value {
    Value::Array(
        rows.iter()
            .map(|r| {
                let t = &r.tally;
                let by_k = |ks: &[usize], hits: &[usize]| -> Value {
                    ks.iter().zip(hits).map(|(k, &n)| (k.to_string(), json!(t.share(n)))).collect()
                };
                json!({
                    "retriever": r.name,
                    "questions": t.questions,
                    "multi_section_questions": t.multi,
                    "section_recall": by_k(&SECTION_KS, &t.section),
                    "chapter_recall": by_k(&CHAPTER_KS, &t.chapter),
                    "all_found_at_10": t.all_found_share(),
                    "mrr_at_10": t.mrr(),
                    "latency_ms": r.latency.map(|(p50, p99)| json!({"p50": p50, "p99": p99})),
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frag(path: &str, lines: Option<(usize, usize)>) -> Fragment {
        Fragment { path: crate::eval::questions::split_path(path), lines }
    }

    fn question(gold: &[&str], multi: bool) -> Question {
        Question {
            id: "q".into(),
            text: "?".into(),
            gold: gold.iter().map(|p| Section::from_path(p)).collect(),
            acceptable: Vec::new(),
            chapters: vec![crate::eval::questions::split_path(gold[0])[0].clone()],
            multi,
        }
    }

    #[test]
    fn sections_hold_their_subtree_by_lines_or_by_path() {
        let s = Section { path: vec!["A".into(), "B".into()], lines: Some((10, 20)) };
        assert!(s.holds(&frag("X", Some((18, 25)))), "lines win over titles");
        assert!(!s.holds(&frag("A > B", Some((21, 30)))));
        let s = Section::from_path("A > B");
        assert!(s.holds(&frag("A > B > C", Some((1, 2)))));
        assert!(!s.holds(&frag("A > Bee", None)));
        assert!(!s.holds(&frag("A", None)), "the parent is not inside its child");
    }

    #[test]
    fn recall_chapters_all_found_and_mrr() {
        let mut t = Tally::default();
        let mut add = |q: Question, f: &[Fragment]| t.add(&q, f, &chapters_of(f));
        // Right at rank 3, chapter A second among chapters.
        add(question(&["A > B"], false), &[frag("C", None), frag("C > D", None), frag("A > B > E", None)]);
        // A multi-section question with one of its two sections found, at rank 1.
        add(question(&["A > B", "F"], true), &[frag("A > B", None), frag("G", None)]);
        // Nothing right.
        add(question(&["H"], false), &[]);
        assert_eq!(t.section, [1, 2, 2, 2]);
        assert_eq!(t.chapter, [1, 2]);
        assert_eq!((t.multi, t.all_found), (1, 0));
        assert!((t.mrr() - (1.0 / 3.0 + 1.0) / 3.0).abs() < 1e-12, "{}", t.mrr());
        let rows = [Row { name: "x".into(), tally: t, latency: Some((1.25, 9.0)) }];
        let table = table(&rows);
        assert!(table.contains("| x | 0.33 | 0.67 | 0.67 | 0.67 | 0.33 | 0.67 | 0.00 | 0.44 | 1.2 | 9.0 |"), "{table}");
        let v = to_json(&rows);
        assert_eq!(v[0]["section_recall"]["3"], json!(2.0 / 3.0));
        assert_eq!(v[0]["all_found_at_10"], json!(0.0));
        assert_eq!(v[0]["latency_ms"]["p99"], json!(9.0));
    }

    #[test]
    fn a_router_ranking_comes_before_the_fragments_chapters() {
        let f = [frag("C > D", None), frag("A", None), frag("C", None)];
        assert_eq!(chapters_of(&f), ["C", "A"]);
        let routed = vec!["B".to_string(), "C".to_string()];
        assert_eq!(chapter_order([routed.as_slice(), chapters_of(&f).as_slice()]), ["B", "C", "A"]);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let ms: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&ms, 0.5), 51.0);
        assert_eq!(percentile(&ms, 0.99), 99.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
