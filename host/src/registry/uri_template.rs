//! Resource templates (RFC 6570, level 1): `quarry://manual/chapter/{id}`, each `{name}`
//! standing for one non-empty path segment. Enough to route a `resources/read` to the instance
//! whose template matches the URI, and to tell a component's parameters from a client's.

/// A parsed template: literal text and named holes, in turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Var(String),
}

/// The longest template accepted.
const MAX_TEMPLATE_BYTES: usize = 1024;

impl Template {
    /// Parses `text`; refuses operators (`{+x}`, `{?x}`), empty or unclosed holes, and two holes
    /// side by side (where one would end is ambiguous).
    pub fn parse(text: &str) -> Result<Template, String> {
        if text.len() > MAX_TEMPLATE_BYTES {
            return Err(format!("longer than {MAX_TEMPLATE_BYTES} bytes"));
        }
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_string()));
            } else if matches!(parts.last(), Some(Part::Var(_))) {
                return Err("two parameters side by side".into());
            }
            let close = rest[open..].find('}').ok_or("a `{` is not closed")? + open;
            let name = &rest[open + 1..close];
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(format!("parameter {{{name}}} must be a plain name (only level-1 templates are served)"));
            }
            parts.push(Part::Var(name.to_string()));
            rest = &rest[close + 1..];
        }
        if rest.contains('}') {
            return Err("a `}` has no `{`".into());
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_string()));
        }
        Ok(Template { parts })
    }

    /// The parameters' names, in order.
    pub fn params(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Var(v) => Some(v.as_str()),
            Part::Literal(_) => None,
        })
    }

    /// The values of the parameters if `uri` is one of this template's resources.
    pub fn matches(&self, uri: &str) -> Option<Vec<(String, String)>> {
        let mut rest = uri;
        let mut values = Vec::new();
        for (i, part) in self.parts.iter().enumerate() {
            match part {
                Part::Literal(l) => rest = rest.strip_prefix(l.as_str())?,
                Part::Var(name) => {
                    // A value runs to the next literal, within one path segment.
                    let end = match self.parts.get(i + 1) {
                        Some(Part::Literal(next)) => rest.find(next.as_str())?,
                        _ => rest.len(),
                    };
                    let value = &rest[..end];
                    if value.is_empty() || value.contains('/') {
                        return None;
                    }
                    values.push((name.clone(), value.to_string()));
                    rest = &rest[end..];
                }
            }
        }
        rest.is_empty().then_some(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_matches_the_uris_of_its_resources_only() {
        let t = Template::parse("test://template/{id}/data").unwrap();
        assert_eq!(t.params().collect::<Vec<_>>(), ["id"]);
        assert_eq!(t.matches("test://template/123/data"), Some(vec![("id".into(), "123".into())]));
        assert_eq!(t.matches("test://template//data"), None);
        assert_eq!(t.matches("test://template/1/2/data"), None);
        assert_eq!(t.matches("test://template/123/data/more"), None);
        let t = Template::parse("quarry://manual/chapter/{id}").unwrap();
        assert_eq!(t.matches("quarry://manual/chapter/3.1"), Some(vec![("id".into(), "3.1".into())]));
        assert_eq!(t.matches("quarry://other/chapter/3.1"), None);
    }

    #[test]
    fn templates_beyond_level_one_are_refused_by_name() {
        for (bad, why) in [
            ("x://{+path}", "plain name"),
            ("x://{a}{b}", "side by side"),
            ("x://{a", "not closed"),
            ("x://a}", "no `{`"),
            ("x://{}", "plain name"),
        ] {
            let e = Template::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
