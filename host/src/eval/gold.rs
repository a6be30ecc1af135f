//! Answer sections that nothing returned lies under: a heading path written otherwise than the
//! manual writes it (its backticks dropped, another case) scores every question naming it as a
//! miss, silently. After a run, each such section is said, with the closest paths returned.

use std::collections::BTreeSet;

use super::questions::Question;
use super::run::Scored;

/// One warning per answer or acceptable section, named by heading path alone, that no
/// fragment any retriever returned lies under: its question's id (`line N`), the path, and
/// the closest heading paths among those returned.
pub fn unseen_sections(questions: &[Question], scored: &[Scored]) -> Vec<String> {
    let seen: BTreeSet<&Vec<String>> = scored.iter().flat_map(|s| &s.seen).collect();
    let mut out = Vec::new();
    for q in questions {
        for s in q.gold.iter().chain(&q.acceptable) {
            // Placed by lines, a section is found whatever its titles say.
            if s.lines.is_some() || s.path.is_empty() || seen.contains(&s.path) {
                continue;
            }
            let path = s.path.join(" > ");
            let wanted = loose(&s.path);
            let written_otherwise = seen.iter().find(|p| p.len() == s.path.len() && loose(p) == wanted);
            let hint = match written_otherwise {
                Some(p) => format!("the manual writes it \"{}\"", p.join(" > ")),
                None => {
                    let closest = closest(&s.path, &seen);
                    if closest.is_empty() {
                        "no fragment was placed at all".to_string()
                    } else {
                        format!(
                            "closest returned: {}",
                            closest.iter().map(|p| format!("\"{p}\"")).collect::<Vec<_>>().join(", ")
                        )
                    }
                }
            };
            out.push(format!(
                "{}: no fragment returned lies under \"{path}\": a miss, or a path that names no heading of the manual, which is never found ({hint})",
                q.id
            ));
        }
    }
    out
}

/// A path as compared loosely: lower case, without Markdown's code and emphasis marks.
fn loose(path: &[String]) -> String {
    path.join(" > ").chars().filter(|c| !matches!(c, '`' | '*' | '_')).flat_map(char::to_lowercase).collect()
}

/// The two returned paths most like `path`.
fn closest(path: &[String], seen: &BTreeSet<&Vec<String>>) -> Vec<String> {
    let want = loose(path);
    let mut scored: Vec<(f64, String)> =
        seen.iter().map(|p| (strsim::normalized_levenshtein(&want, &loose(p)), p.join(" > "))).collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    scored.into_iter().take(2).map(|(_, p)| p).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::questions::Section;
    use crate::eval::score::{Row, Tally};

    fn question(id: &str, gold: &[&str]) -> Question {
        Question {
            id: id.into(),
            text: "q".into(),
            gold: gold.iter().map(|p| Section::from_path(p)).collect(),
            acceptable: Vec::new(),
            chapters: Vec::new(),
            multi: false,
        }
    }

    fn scored(paths: &[&str]) -> Scored {
        let mut seen = BTreeSet::new();
        for p in paths {
            let p = crate::eval::questions::split_path(p);
            for n in 1..=p.len() {
                seen.insert(p[..n].to_vec());
            }
        }
        Scored { row: Row { name: "x".into(), tally: Tally::default(), latency: None }, details: Vec::new(), seen }
    }

    #[test]
    fn a_path_written_otherwise_is_named_with_the_manuals_spelling() {
        let runs = [scored(&["Flags > `--bwlimit`", "Usage > Install"])];
        let w = unseen_sections(&[question("line 3", &["Flags > --bwlimit"]), question("line 4", &["Usage"])], &runs);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("line 3: ") && w[0].contains("the manual writes it \"Flags > `--bwlimit`\""), "{w:?}");
        let w = unseen_sections(&[question("line 5", &["Usage > Instal"])], &runs);
        assert!(w[0].contains("closest returned: \"Usage > Install\""), "{w:?}");
    }
}
