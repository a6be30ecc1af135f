//! The chapter tree of a Markdown manual, from a CommonMark parser's headings.
//!
//! Every heading is a node, ATX or setext, at any depth of blockquote; headings inside code
//! fences are code, and `{#anchor}` attributes are not part of a title. A node's parent is the
//! nearest heading before it with a lower level, so a jump from level 1 to level 4 makes the
//! level-4 heading a child of the level-1 one. Ids are positions in the tree: `1`, `1.2`,
//! `1.2.3`. Text before the first heading is node `0`, "Preamble".
//!
//! A manual without headings gets a pseudo-tree of blocks of at most [`BLOCK_CHARS`]
//! characters, cut at paragraph boundaries, and a warning.

use std::ops::Range;

use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use rag_core::chunk::Chunking;

/// The largest block of a pseudo-tree, in characters.
pub const BLOCK_CHARS: usize = 4000;

/// Why a manual has no usable tree.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TreeError {
    /// Nothing but white space.
    #[error("the document is empty: there is nothing to index")]
    Empty,
    /// More headings than the configured limit.
    #[error(
        "the document has {found} headings, more than the limit of {limit}: is it a manual? Raise `max_headings` in the tool's config if it is"
    )]
    TooManyHeadings {
        /// Headings found.
        found: usize,
        /// The limit.
        limit: usize,
    },
}

/// One chapter (a heading and what follows it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// `1`, `1.2`, `1.2.3`; `0` for the preamble.
    pub id: String,
    /// Heading level (1–6); 1 for the preamble and pseudo-tree blocks.
    pub level: u8,
    /// The heading's text, without attributes.
    pub title: String,
    /// The parent's position in [`Tree::nodes`].
    pub parent: Option<usize>,
    /// The children's positions.
    pub children: Vec<usize>,
    /// Bytes of the node's own text: from its heading to the next heading of any level.
    pub own: Range<usize>,
    /// Bytes of the node and its descendants.
    pub subtree: Range<usize>,
    /// 1-based lines of `own`, inclusive.
    pub lines: (usize, usize),
    /// 1-based last line of `subtree`.
    pub subtree_last_line: usize,
}

/// The URI chapter `id` is read at (`resources/read`), as the component names it: the host lists
/// it as `quarry://INSTANCE/chapter/{id}`.
pub fn chapter_uri(id: &str) -> String {
    format!("quarry://self/chapter/{id}")
}

/// The chapters of a document, in document order.
#[derive(Clone, Debug, Default)]
pub struct Tree {
    /// Every node, in document order (a parent before its children).
    pub nodes: Vec<Node>,
    /// Top-level nodes.
    pub roots: Vec<usize>,
    /// Set when the tree is not made of headings (a pseudo-tree), saying why.
    pub warning: Option<String>,
}

impl Tree {
    /// The position of node `id`.
    pub fn find(&self, id: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.id == id)
    }

    /// Titles from the top-level ancestor down to node `i`.
    pub fn path(&self, i: usize) -> Vec<String> {
        let mut path = vec![self.nodes[i].title.clone()];
        let mut at = self.nodes[i].parent;
        while let Some(p) = at {
            path.push(self.nodes[p].title.clone());
            at = self.nodes[p].parent;
        }
        path.reverse();
        path
    }

    /// Whether node `i` is `ancestor` or inside it.
    pub fn is_within(&self, i: usize, ancestor: usize) -> bool {
        let mut at = Some(i);
        while let Some(n) = at {
            if n == ancestor {
                return true;
            }
            at = self.nodes[n].parent;
        }
        false
    }

    /// The chapters a question is routed among, and their level (1: top-level): the top-level
    /// nodes, or, where there is one alone (a title above the sections, as most documents
    /// have), the children of the first node down that has several. Routing among one chapter
    /// would choose nothing.
    pub fn branches(&self) -> (&[usize], usize) {
        let (mut at, mut level) = (&self.roots[..], 1);
        while let [only] = at
            && !self.nodes[*only].children.is_empty()
        {
            at = &self.nodes[*only].children;
            level += 1;
        }
        (at, level)
    }

    /// For every node, the chapter of [`Tree::branches`] it lies in (none for the text of the
    /// nodes above them: a title's own lines before its first section).
    pub fn branch_of(&self) -> Vec<Option<usize>> {
        let mut of: Vec<Option<usize>> = vec![None; self.nodes.len()];
        for &b in self.branches().0 {
            of[b] = Some(b);
        }
        // Parents come before their children: one pass, on every route.
        for n in 0..self.nodes.len() {
            if of[n].is_none() {
                of[n] = self.nodes[n].parent.and_then(|p| of[p]);
            }
        }
        of
    }

    /// The top-level ancestor of node `i` (itself when it is top-level).
    pub fn top(&self, i: usize) -> usize {
        let mut n = i;
        while let Some(p) = self.nodes[n].parent {
            n = p;
        }
        n
    }
}

/// Byte offsets where lines start, for turning offsets into 1-based line numbers.
pub(crate) struct Lines(Vec<usize>);

impl Lines {
    pub(crate) fn new(text: &str) -> Lines {
        Lines(std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect())
    }

    /// The 1-based line holding byte `at` (any byte, boundary or not).
    pub(crate) fn line(&self, at: usize) -> usize {
        self.0.partition_point(|&s| s <= at)
    }

    /// The byte where the line holding `at` starts.
    fn start_of(&self, at: usize) -> usize {
        self.0[self.line(at) - 1]
    }
}

/// A heading found in a document's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heading {
    /// 1 = top.
    pub level: u8,
    /// Its text.
    pub title: String,
    /// Byte where its line starts.
    pub start: usize,
}

/// Builds the tree of `text` (Markdown), refusing more than `max_headings` headings.
pub fn parse(text: &str, max_headings: usize) -> Result<Tree, TreeError> {
    if text.trim().is_empty() {
        return Err(TreeError::Empty);
    }
    let lines = Lines::new(text);
    // (level, title, start of the heading's line)
    let mut headings: Vec<(u8, String, usize)> = Vec::new();
    let mut current: Option<(u8, String, usize)> = None;
    let options = Options::ENABLE_HEADING_ATTRIBUTES | Options::ENABLE_TABLES;
    for (event, range) in Parser::new_ext(text, options).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                current = Some((level_number(level), String::new(), lines.start_of(range.start)));
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some((level, title, start)) = current.take() {
                    headings.push((level, title.split_whitespace().collect::<Vec<_>>().join(" "), start));
                    if headings.len() > max_headings {
                        // Count them all for the message; it is cheap next to the parse.
                        let found = Parser::new_ext(text, options)
                            .filter(|e| matches!(e, Event::Start(Tag::Heading { .. })))
                            .count();
                        return Err(TreeError::TooManyHeadings { found, limit: max_headings });
                    }
                }
            }
            Event::Text(t) | Event::Code(t) | Event::InlineMath(t) => {
                if let Some((_, title, _)) = current.as_mut() {
                    title.push_str(&t);
                }
            }
            Event::SoftBreak | Event::HardBreak => {
                if let Some((_, title, _)) = current.as_mut() {
                    title.push(' ');
                }
            }
            _ => {}
        }
    }
    let headings = headings.into_iter().map(|(level, title, start)| Heading { level, title, start }).collect();
    from_headings(text, headings, max_headings)
}

/// Builds the tree of `text` from `headings` found in it (in order; each starting a line), as
/// another format's reader gives them. Refuses more than `max_headings`.
pub fn from_headings(text: &str, headings: Vec<Heading>, max_headings: usize) -> Result<Tree, TreeError> {
    if text.trim().is_empty() {
        return Err(TreeError::Empty);
    }
    if headings.len() > max_headings {
        return Err(TreeError::TooManyHeadings { found: headings.len(), limit: max_headings });
    }
    let lines = Lines::new(text);
    if headings.is_empty() {
        return Ok(pseudo_tree(text, &lines));
    }
    let headings: Vec<(u8, String, usize)> = headings.into_iter().map(|h| (h.level.max(1), h.title, h.start)).collect();
    let mut tree = Tree::default();
    if !text[..headings[0].2].trim().is_empty() {
        tree.nodes.push(node("0".into(), 1, "Preamble".into(), None, 0..headings[0].2, &lines));
        tree.roots.push(0);
    }
    // Open ancestors: (level, position).
    let mut stack: Vec<(u8, usize)> = Vec::new();
    for (k, (level, title, start)) in headings.iter().enumerate() {
        let end = headings.get(k + 1).map_or(text.len(), |h| h.2);
        while stack.last().is_some_and(|&(l, _)| l >= *level) {
            stack.pop();
        }
        let parent = stack.last().map(|&(_, p)| p);
        let i = tree.nodes.len();
        let id = match parent {
            Some(p) => format!("{}.{}", tree.nodes[p].id, tree.nodes[p].children.len() + 1),
            None => (tree.roots.iter().filter(|&&r| tree.nodes[r].id != "0").count() + 1).to_string(),
        };
        let title = if title.is_empty() { "(untitled)".to_string() } else { title.clone() };
        tree.nodes.push(node(id, *level, title, parent, *start..end, &lines));
        match parent {
            Some(p) => tree.nodes[p].children.push(i),
            None => tree.roots.push(i),
        }
        stack.push((*level, i));
    }
    // A subtree ends where the next node that is not a descendant starts.
    for i in (0..tree.nodes.len()).rev() {
        let end = tree.nodes[i].children.last().map_or(tree.nodes[i].own.end, |&c| tree.nodes[c].subtree.end);
        tree.nodes[i].subtree.end = end;
    }
    fill_lines(&mut tree, &lines, text);
    Ok(tree)
}

fn level_number(level: HeadingLevel) -> u8 {
    match level {
        HeadingLevel::H1 => 1,
        HeadingLevel::H2 => 2,
        HeadingLevel::H3 => 3,
        HeadingLevel::H4 => 4,
        HeadingLevel::H5 => 5,
        HeadingLevel::H6 => 6,
    }
}

/// The 1-based line of the last byte before `end` (a range's end is exclusive).
fn last_line(lines: &Lines, text: &str, end: usize) -> usize {
    let mut at = end.saturating_sub(1);
    // A range that ends with its newline ends on the line before the next one.
    while at > 0 && !text.is_char_boundary(at) {
        at -= 1;
    }
    lines.line(at)
}

fn node(id: String, level: u8, title: String, parent: Option<usize>, own: Range<usize>, lines: &Lines) -> Node {
    Node {
        id,
        level,
        title,
        parent,
        children: Vec::new(),
        lines: (lines.line(own.start), 0),
        subtree: own.clone(),
        own,
        subtree_last_line: 0,
    }
}

/// Blocks of at most [`BLOCK_CHARS`] characters, cut at paragraph boundaries where possible,
/// titled by their first words.
fn pseudo_tree(text: &str, lines: &Lines) -> Tree {
    // rag-core's chunking: text-splitter's cuts, in linear time however long a line is.
    let blocks = Chunking::Characters { size: BLOCK_CHARS, overlap: 0 };
    // (It fails only on sizes that do not work; these do.)
    let mut starts: Vec<usize> = blocks.split(text, None).unwrap_or_default().iter().map(|c| c.offset).collect();
    // The first block starts at the top, leading white space included.
    match starts.first_mut() {
        Some(first) => *first = 0,
        None => starts.push(0),
    }
    let mut tree = Tree::default();
    for (k, &start) in starts.iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(text.len());
        let first: String = text[start..end].split_whitespace().take(8).collect::<Vec<_>>().join(" ");
        let title: String = if first.chars().count() > 60 {
            first.chars().take(60).chain(std::iter::once('…')).collect()
        } else {
            first
        };
        tree.nodes.push(node((k + 1).to_string(), 1, format!("Part {}: {title}", k + 1), None, start..end, lines));
        tree.roots.push(k);
    }
    tree.warning = Some(format!(
        "the document has no headings: it was split into {} blocks of up to {BLOCK_CHARS} characters, \
         so routing picks blocks, not chapters; give it Markdown headings for a real chapter tree",
        tree.nodes.len()
    ));
    fill_lines(&mut tree, lines, text);
    tree
}

fn fill_lines(tree: &mut Tree, lines: &Lines, text: &str) {
    for n in &mut tree.nodes {
        n.lines.1 = last_line(lines, text, n.own.end);
        n.subtree_last_line = last_line(lines, text, n.subtree.end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(text: &str) -> Tree {
        parse(text, 10_000).unwrap()
    }

    #[test]
    fn atx_setext_fences_anchors_and_jumps() {
        let text = "intro words\n\n# One {#one}\n\nbody\n\n```\n# not a heading\n```\n\nTwo\n===\n\n#### Deep\n\nx\n\n## Sub `code`\n\n> ### Quoted\n\ntail\n";
        let t = tree(text);
        let got: Vec<(&str, u8, &str)> = t.nodes.iter().map(|n| (n.id.as_str(), n.level, n.title.as_str())).collect();
        assert_eq!(
            got,
            vec![
                ("0", 1, "Preamble"),
                ("1", 1, "One"),
                ("2", 1, "Two"),
                ("2.1", 4, "Deep"),
                ("2.2", 2, "Sub code"),
                ("2.2.1", 3, "Quoted"),
            ]
        );
        assert_eq!(t.roots, vec![0, 1, 2]);
        // "# One" is line 3; its own text runs to the line before "Two" (line 11).
        assert_eq!(t.nodes[1].lines, (3, 10));
        assert!(t.nodes[1].own.end == t.nodes[2].own.start);
        assert_eq!(&text[t.nodes[2].own.start..t.nodes[2].own.start + 3], "Two");
        assert_eq!(t.nodes[2].subtree.end, text.len());
        assert_eq!(t.path(5), vec!["Two", "Sub code", "Quoted"]);
        assert!(t.is_within(5, 2) && !t.is_within(5, 1));
        assert!(t.warning.is_none());
    }

    #[test]
    fn duplicate_titles_are_separate_nodes() {
        let t = tree("# A\n## Options\nx\n# B\n## Options\ny\n");
        assert_eq!(t.nodes.iter().filter(|n| n.title == "Options").count(), 2);
        assert_eq!(t.nodes[3].id, "2.1");
    }

    #[test]
    fn no_headings_gives_blocks_and_a_warning() {
        let para = "A sentence of plain text without any heading at all. ".repeat(20);
        let text = vec![para; 10].join("\n\n");
        let t = tree(&text);
        assert!(t.nodes.len() >= 3, "{}", t.nodes.len());
        assert!(t.nodes.iter().all(|n| n.own.len() <= BLOCK_CHARS + 2));
        assert!(t.warning.as_deref().unwrap().contains("no headings"));
        assert_eq!(t.nodes.last().unwrap().own.end, text.len());
    }

    #[test]
    fn empty_and_too_many_headings_are_errors() {
        assert_eq!(parse(" \n\t\n", 10).unwrap_err(), TreeError::Empty);
        let many = "# h\n".repeat(30);
        let e = parse(&many, 10).unwrap_err();
        assert_eq!(e, TreeError::TooManyHeadings { found: 30, limit: 10 });
        assert!(e.to_string().contains("max_headings"));
    }
}
