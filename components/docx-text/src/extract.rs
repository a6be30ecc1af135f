//! Text out of a DOCX with docx-rs, keeping what CrewAI's loader drops: headings (as a path on
//! every block), tables (one line per row, cells separated by ` | `), list items, text boxes,
//! and footnotes and endnotes (docx-rs does not read those parts; [`crate::notes`] does).
//!
//! Tracked changes read as accepted: insertions and moves are kept, deletions dropped.

use std::collections::HashMap;

use docx_rs::{
    DocumentChild, DrawingData, InsertChild, MoveToChild, Paragraph, ParagraphChild, RunChild, StructuredDataTagChild,
    Table, TableCellContent, TableChild, TableRowChild, TextBoxContentChild, TocContent,
};

use crate::notes;
use crate::package::{self, DocxError};

/// Tables nest inside tables and text boxes; beyond this depth the rest is skipped, so a hostile
/// document cannot exhaust the stack.
const MAX_DEPTH: usize = 16;

/// What a block is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A heading's title (the first block of its section).
    Heading,
    /// Body text.
    Paragraph,
    /// A numbered or bulleted list item.
    ListItem,
    /// A whole table, one line per row.
    Table,
    /// The text of a text box (a drawing or shape holding paragraphs).
    TextBox,
    /// A footnote or an endnote.
    Note,
}

/// One piece of text and where it sits in the document's heading tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// Titles of the enclosing headings, outermost first.
    pub heading_path: Vec<String>,
    /// What kind of block.
    pub kind: Kind,
    /// The text.
    pub text: String,
}

/// What came out of a document.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extracted {
    /// The blocks in document order (notes last).
    pub blocks: Vec<Block>,
    /// Headings seen.
    pub headings: usize,
    /// Tables seen (nested ones included).
    pub tables: usize,
    /// Text boxes seen.
    pub text_boxes: usize,
    /// Footnotes and endnotes kept.
    pub notes: usize,
}

impl Extracted {
    /// Characters of text in all blocks.
    pub fn chars(&self) -> usize {
        self.blocks.iter().map(|b| b.text.chars().count()).sum()
    }
}

/// Vets and reads `bytes`; a document with no text at all is an error ([`DocxError::NoText`]).
pub fn extract(bytes: &[u8]) -> Result<Extracted, DocxError> {
    package::vet(bytes)?;
    let options = docx_rs::ReadDocxOptions::default().with_image_previews(false);
    let docx = docx_rs::read_docx_with_options(bytes, options).map_err(|e| DocxError::Parse(e.to_string()))?;
    let mut w = Walker { levels: heading_levels(&docx.styles.styles), ..Walker::default() };
    for child in &docx.document.children {
        w.document_child(child);
    }
    for (part, label) in [("word/footnotes.xml", "Footnotes"), ("word/endnotes.xml", "Endnotes")] {
        let Some(xml) = package::read_part(bytes, part) else { continue };
        for note in notes::parse(&xml) {
            w.out.notes += 1;
            w.out.blocks.push(Block {
                heading_path: vec![label.to_string()],
                kind: Kind::Note,
                text: format!("[{}] {}", note.id, note.text),
            });
        }
    }
    if w.out.blocks.is_empty() {
        return Err(DocxError::NoText);
    }
    Ok(w.out)
}

/// Heading level (1 = top) of each paragraph style that is a heading: by name (`heading N`) or
/// by outline level, following `basedOn` a few steps. `Title` is not a level: it names the
/// document, and putting it above every path would only repeat it in every chunk.
fn heading_levels(styles: &[docx_rs::Style]) -> HashMap<String, usize> {
    let by_id: HashMap<&str, &docx_rs::Style> = styles.iter().map(|s| (s.style_id.as_str(), s)).collect();
    let own = |s: &docx_rs::Style| -> Option<usize> {
        if s.name.is_heading() {
            return s.name.get_heading_number().filter(|n| (1..=9).contains(n));
        }
        s.paragraph_property.outline_lvl.as_ref().map(|o| o.v + 1).filter(|n| (1..=9).contains(n))
    };
    let mut levels = HashMap::new();
    for s in styles {
        let mut cur = Some(s);
        for _ in 0..8 {
            let Some(c) = cur else { break };
            if let Some(l) = own(c) {
                levels.insert(s.style_id.clone(), l);
                break;
            }
            cur = c.based_on.as_ref().and_then(|b| by_id.get(basedon_id(b).as_str()).copied());
        }
    }
    levels
}

/// docx-rs keeps `basedOn`'s value private; its serialisation is the value.
fn basedon_id(b: &docx_rs::BasedOn) -> String {
    serde_json::to_value(b).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

#[derive(Default)]
struct Walker {
    levels: HashMap<String, usize>,
    /// Open headings: (level, title).
    path: Vec<(usize, String)>,
    out: Extracted,
}

impl Walker {
    fn heading_path(&self) -> Vec<String> {
        self.path.iter().map(|(_, t)| t.clone()).collect()
    }

    fn push(&mut self, kind: Kind, text: String) {
        let text = text.trim().to_string();
        if !text.is_empty() {
            let heading_path = self.heading_path();
            self.out.blocks.push(Block { heading_path, kind, text });
        }
    }

    fn document_child(&mut self, child: &DocumentChild) {
        match child {
            DocumentChild::Paragraph(p) => self.paragraph(p),
            DocumentChild::Table(t) => self.table(t),
            DocumentChild::StructuredDataTag(sdt) => self.sdt_children(&sdt.children, 0),
            DocumentChild::TableOfContents(toc) => {
                for c in &toc.before_contents {
                    match c {
                        TocContent::Paragraph(p) => self.paragraph(p),
                        TocContent::Table(t) => self.table(t),
                    }
                }
            }
            _ => {}
        }
    }

    fn sdt_children(&mut self, children: &[StructuredDataTagChild], depth: usize) {
        if depth > MAX_DEPTH {
            return;
        }
        let mut inline = String::new();
        for c in children {
            match c {
                StructuredDataTagChild::Paragraph(p) => self.paragraph(p),
                StructuredDataTagChild::Table(t) => self.table(t),
                StructuredDataTagChild::Run(r) => run_text(&r.children, &mut inline, &mut Vec::new()),
                StructuredDataTagChild::StructuredDataTag(s) => self.sdt_children(&s.children, depth + 1),
                _ => {}
            }
        }
        self.push(Kind::Paragraph, inline);
    }

    fn heading_level(&self, p: &Paragraph) -> Option<usize> {
        if let Some(o) = &p.property.outline_lvl {
            return (o.v < 9).then_some(o.v + 1);
        }
        p.property.style.as_ref().and_then(|s| self.levels.get(&s.val).copied())
    }

    fn paragraph(&mut self, p: &Paragraph) {
        let mut text = String::new();
        let mut boxes = Vec::new();
        paragraph_text(&p.children, &mut text, &mut boxes, 0);
        if let Some(level) = self.heading_level(p) {
            let title = text.split_whitespace().collect::<Vec<_>>().join(" ");
            if !title.is_empty() {
                self.out.headings += 1;
                while self.path.last().is_some_and(|(l, _)| *l >= level) {
                    self.path.pop();
                }
                self.path.push((level, title.clone()));
                self.push(Kind::Heading, title);
            }
        } else if p.property.numbering_property.as_ref().is_some_and(|n| n.id.as_ref().is_some_and(|i| i.id != 0)) {
            let indent = p.property.numbering_property.as_ref().and_then(|n| n.level.as_ref()).map_or(0, |l| l.val);
            if !text.trim().is_empty() {
                self.push(Kind::ListItem, format!("{}- {}", "  ".repeat(indent.min(8)), text.trim()));
            }
        } else {
            self.push(Kind::Paragraph, text);
        }
        for b in boxes {
            self.out.text_boxes += 1;
            self.text_box(&b, 0);
        }
    }

    fn text_box(&mut self, children: &[TextBoxContentChild], depth: usize) {
        let mut text = String::new();
        for c in children {
            match c {
                TextBoxContentChild::Paragraph(p) => {
                    let mut nested = Vec::new();
                    paragraph_text(&p.children, &mut text, &mut nested, depth + 1);
                    text.push('\n');
                    if depth < MAX_DEPTH {
                        for n in nested {
                            self.out.text_boxes += 1;
                            self.text_box(&n, depth + 1);
                        }
                    }
                }
                TextBoxContentChild::Table(t) => {
                    self.out.tables += 1;
                    text.push_str(&table_text(t, depth + 1, &mut self.out.tables));
                    text.push('\n');
                }
            }
        }
        self.push(Kind::TextBox, text);
    }

    fn table(&mut self, t: &Table) {
        self.out.tables += 1;
        let text = table_text(t, 0, &mut self.out.tables);
        self.push(Kind::Table, text);
    }
}

/// A table as text: one line per row, cells joined by ` | `; a nested table's rows are joined
/// by `; ` inside its cell.
fn table_text(t: &Table, depth: usize, tables: &mut usize) -> String {
    let mut lines = Vec::new();
    for TableChild::TableRow(row) in &t.rows {
        let mut cells = Vec::new();
        for TableRowChild::TableCell(cell) in &row.cells {
            let mut parts = Vec::new();
            for c in &cell.children {
                match c {
                    TableCellContent::Paragraph(p) => {
                        let mut s = String::new();
                        paragraph_text(&p.children, &mut s, &mut Vec::new(), depth + 1);
                        parts.push(s);
                    }
                    TableCellContent::Table(inner) if depth < MAX_DEPTH => {
                        *tables += 1;
                        parts.push(table_text(inner, depth + 1, tables).replace('\n', "; "));
                    }
                    _ => {}
                }
            }
            let cell = parts.iter().map(|s| s.split_whitespace().collect::<Vec<_>>().join(" ")).collect::<Vec<_>>();
            cells.push(cell.into_iter().filter(|s| !s.is_empty()).collect::<Vec<_>>().join(" "));
        }
        if cells.iter().any(|c| !c.is_empty()) {
            lines.push(cells.join(" | "));
        }
    }
    lines.join("\n")
}

/// Appends a paragraph's visible text to `out`; text boxes met on the way go to `boxes`.
fn paragraph_text(
    children: &[ParagraphChild],
    out: &mut String,
    boxes: &mut Vec<Vec<TextBoxContentChild>>,
    depth: usize,
) {
    if depth > MAX_DEPTH {
        return;
    }
    for c in children {
        match c {
            ParagraphChild::Run(r) => run_text(&r.children, out, boxes),
            ParagraphChild::Insert(i) => {
                for c in &i.children {
                    if let InsertChild::Run(r) = c {
                        run_text(&r.children, out, boxes);
                    }
                }
            }
            ParagraphChild::MoveTo(m) => {
                for c in &m.children {
                    if let MoveToChild::Run(r) = c {
                        run_text(&r.children, out, boxes);
                    }
                }
            }
            ParagraphChild::Hyperlink(h) => paragraph_text(&h.children, out, boxes, depth + 1),
            ParagraphChild::StructuredDataTag(s) => {
                for c in &s.children {
                    match c {
                        StructuredDataTagChild::Run(r) => run_text(&r.children, out, boxes),
                        StructuredDataTagChild::Paragraph(p) => paragraph_text(&p.children, out, boxes, depth + 1),
                        _ => {}
                    }
                }
            }
            // Deleted text (tracked changes) and moved-away text are not part of the document.
            _ => {}
        }
    }
}

fn run_text(children: &[RunChild], out: &mut String, boxes: &mut Vec<Vec<TextBoxContentChild>>) {
    for c in children {
        match c {
            RunChild::Text(t) => out.push_str(&t.text),
            RunChild::Tab(_) | RunChild::PTab(_) => out.push('\t'),
            RunChild::Break(_) | RunChild::CarriageReturn(_) => out.push('\n'),
            RunChild::Drawing(d) => {
                if let Some(DrawingData::TextBox(tb)) = &d.data {
                    boxes.push(tb.children.clone());
                }
            }
            _ => {}
        }
    }
}
