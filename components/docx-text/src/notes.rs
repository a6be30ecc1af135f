//! Footnotes and endnotes (`word/footnotes.xml`, `word/endnotes.xml`), which docx-rs's reader
//! skips. Separator pseudo-notes are dropped; each note's paragraphs become one line of text.

use quick_xml::Reader;
use quick_xml::events::Event;

/// One footnote or endnote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// The note's id (what its reference mark points at).
    pub id: String,
    /// Its text.
    pub text: String,
}

/// The notes in a footnotes or endnotes part. Malformed XML ends the list where it breaks: notes
/// are a bonus, never a reason to refuse a document.
pub fn parse(xml: &[u8]) -> Vec<Note> {
    let mut reader = Reader::from_reader(xml);
    let mut buf = Vec::new();
    let mut notes = Vec::new();
    let mut current: Option<Note> = None;
    let mut in_text = false;
    loop {
        match reader.read_event_into(&mut buf) {
            Ok(Event::Start(e)) => match e.local_name().as_ref() {
                b"footnote" | b"endnote" => {
                    let mut id = String::new();
                    let mut separator = false;
                    for a in e.attributes().flatten() {
                        let v = String::from_utf8_lossy(&a.value).into_owned();
                        match a.key.local_name().as_ref() {
                            b"id" => id = v,
                            b"type" => separator = v != "normal",
                            _ => {}
                        }
                    }
                    current = (!separator).then(|| Note { id, text: String::new() });
                }
                b"t" => in_text = true,
                _ => {}
            },
            Ok(Event::Text(t)) if in_text => {
                if let Some(n) = current.as_mut() {
                    let raw = String::from_utf8_lossy(t.as_ref()).into_owned();
                    n.text.push_str(&unescape(&raw));
                }
            }
            Ok(Event::GeneralRef(r)) if in_text => {
                if let Some(n) = current.as_mut() {
                    let name = String::from_utf8_lossy(r.as_ref()).into_owned();
                    n.text.push_str(&unescape(&format!("&{name};")));
                }
            }
            Ok(Event::Empty(e)) if matches!(e.local_name().as_ref(), b"tab" | b"br") => {
                if let Some(n) = current.as_mut() {
                    n.text.push(' ');
                }
            }
            Ok(Event::End(e)) => match e.local_name().as_ref() {
                b"t" => in_text = false,
                b"p" => {
                    if let Some(n) = current.as_mut() {
                        n.text.push(' ');
                    }
                }
                b"footnote" | b"endnote" => {
                    if let Some(mut n) = current.take() {
                        n.text = n.text.split_whitespace().collect::<Vec<_>>().join(" ");
                        if !n.text.is_empty() {
                            notes.push(n);
                        }
                    }
                }
                _ => {}
            },
            Ok(Event::Eof) | Err(_) => break,
            Ok(_) => {}
        }
        buf.clear();
    }
    notes
}

/// The five XML entities and numeric character references.
fn unescape(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        let Some(end) = tail.find(';') else {
            out.push_str(tail);
            return out;
        };
        let entity = &tail[1..end];
        let ch = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match ch {
            Some(c) => out.push(c),
            None => out.push_str(&tail[..=end]),
        }
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_notes_drops_separators() {
        let xml = br#"<w:footnotes xmlns:w="x">
            <w:footnote w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:footnote>
            <w:footnote w:id="1"><w:p><w:r><w:t>First &amp; only</w:t></w:r><w:r><w:t xml:space="preserve"> note.</w:t></w:r></w:p></w:footnote>
            <w:footnote w:id="2"><w:p/></w:footnote>
        </w:footnotes>"#;
        assert_eq!(parse(xml), vec![Note { id: "1".into(), text: "First & only note.".into() }]);
        assert_eq!(parse(b"<w:footnotes><w:footnote w:id='1'><w:t>cut"), vec![]);
    }
}
