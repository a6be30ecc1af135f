//! `quarry eval --details`: per question, where the answer was found (by each retriever with
//! `--compare`), the routed chapters with their confidences and the first fragments, so that a
//! failed question says why.

use serde_json::{Value, json};

use super::questions::Question;
use super::run::{Detail, Scored};
use super::score::DEPTH;

/// `Some(k)` as "at k", `None` as "not in the first 10".
fn at(found: Option<usize>) -> String {
    found.map_or(format!("not in the first {DEPTH}"), |k| format!("at {k}"))
}

/// The per-question lines: the last retriever's route and fragments (the tool's own, or the
/// routed one with `--compare`), and where every retriever found the answer.
pub fn details_text(questions: &[Question], scored: &[Scored]) -> String {
    let Some(main) = scored.last() else { return String::new() };
    let mut out = String::new();
    for (i, q) in questions.iter().enumerate() {
        let d = &main.details[i];
        out.push_str(&format!("{}: found {}", q.id, at(d.found_at)));
        if scored.len() > 1 {
            out.push_str(&format!(" ({})", main.row.name));
            let others: Vec<String> = scored[..scored.len() - 1]
                .iter()
                .map(|s| format!("{} {}", s.row.name, at(s.details[i].found_at)))
                .collect();
            out.push_str(&format!("; {}", others.join(", ")));
        }
        if let Some(all) = d.all_found {
            out.push_str(if all { "; every gold section found" } else { "; not every gold section found" });
        }
        out.push('\n');
        out.push_str(&format!("  question: {}\n", crate::support::text::cut(&q.text, 300)));
        let paths =
            |s: &[super::questions::Section]| s.iter().map(|s| s.path.join(" > ")).collect::<Vec<_>>().join(" | ");
        out.push_str(&format!("  gold: {}\n", paths(&q.gold)));
        if !q.acceptable.is_empty() {
            out.push_str(&format!("  also right: {}\n", paths(&q.acceptable)));
        }
        if !d.routed.is_empty() {
            let routed: Vec<String> = d
                .routed
                .iter()
                .map(|r| match r.confidence {
                    Some(c) => format!("{} {} ({c:.2})", r.id, r.path),
                    None => format!("{} {}", r.id, r.path),
                })
                .collect();
            out.push_str(&format!("  routed: {}\n", routed.join("; ")));
        }
        for (k, h) in d.hits.iter().enumerate() {
            let lines = h.lines.map(|(a, b)| format!("lines {a}-{b}, ")).unwrap_or_default();
            let score = h.score.map(|s| format!("{s:.2}")).unwrap_or_else(|| "-".into());
            out.push_str(&format!("  {}. {} ({lines}score {score})\n", k + 1, h.path));
        }
    }
    out
}

/// The same as JSON: one object per question, with each retriever's rank and the last
/// retriever's route and fragments.
pub fn details_json(questions: &[Question], scored: &[Scored]) -> Value {
    let Some(main) = scored.last() else { return Value::Array(Vec::new()) };
    Value::Array(
        questions
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let d: &Detail = &main.details[i];
                let found: serde_json::Map<String, Value> =
                    scored.iter().map(|s| (s.row.name.clone(), json!(s.details[i].found_at))).collect();
                json!({
                    "id": q.id,
                    "question": q.text,
                    "gold": q.gold.iter().map(|s| s.path.join(" > ")).collect::<Vec<_>>(),
                    "found_at": found,
                    "all_found": d.all_found,
                    "routed": d.routed,
                    "hits": d.hits,
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::questions::Section;
    use crate::eval::run::{RoutedChapter, ShownHit};
    use crate::eval::score::{Row, Tally};

    fn scored(name: &str, found_at: Option<usize>) -> Scored {
        Scored {
            row: Row { name: name.into(), tally: Tally::default(), latency: None },
            details: vec![Detail {
                id: "q1".into(),
                found_at,
                all_found: Some(false),
                routed: vec![RoutedChapter { id: "3".into(), path: "Sync".into(), confidence: Some(0.42) }],
                hits: vec![ShownHit { path: "Sync > Bandwidth".into(), lines: Some((10, 20)), score: Some(0.8) }],
            }],
            seen: Default::default(),
        }
    }

    #[test]
    fn says_where_each_retriever_found_it_and_why() {
        let q = Question {
            id: "q1".into(),
            text: "How do I go slowly by day?".into(),
            gold: vec![Section::from_path("Sync > Bandwidth"), Section::from_path("Install")],
            acceptable: Vec::new(),
            chapters: vec!["Sync".into(), "Install".into()],
            multi: true,
        };
        let text = details_text(std::slice::from_ref(&q), &[scored("global_vector", None), scored("routed", Some(2))]);
        assert!(
            text.starts_with(
                "q1: found at 2 (routed); global_vector not in the first 10; not every gold section found\n"
            ),
            "{text}"
        );
        assert!(text.contains("  gold: Sync > Bandwidth | Install\n"), "{text}");
        assert!(text.contains("  routed: 3 Sync (0.42)\n"), "{text}");
        assert!(text.contains("  1. Sync > Bandwidth (lines 10-20, score 0.80)\n"), "{text}");
        let v = details_json(&[q], &[scored("global_vector", None), scored("routed", Some(2))]);
        assert_eq!(v[0]["found_at"], json!({"global_vector": null, "routed": 2}));
        assert_eq!(v[0]["routed"][0]["confidence"], json!(0.42));
        assert_eq!(v[0]["hits"][0]["lines"], json!([10, 20]));
    }
}
