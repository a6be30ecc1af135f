//! Vetting a file before docx-rs reads it: what kind of file it is, whether it is a complete
//! DOCX package, and whether it is safe to unpack.
//!
//! docx-rs trusts the archive: it reserves each part's declared size up front and unwraps read
//! errors. So every part is first inflated here, streaming into nothing, against the declared
//! size and the caps below. A zip bomb is refused after at most [`MAX_TOTAL`] inflated bytes, in
//! constant memory; a damaged part is reported instead of panicking inside docx-rs.
//!
//! docx-rs also reads nested elements by recursion (a table in a cell of a table, and so on),
//! so a document nesting them thousands deep overflows the stack of whoever reads it. Every
//! XML part (by its content, UTF-8 or UTF-16, or its name, whatever the relationships call it)
//! is scanned first, streaming, and one nesting elements more than [`MAX_DEPTH`] deep is
//! refused.

use std::io::{BufRead, Cursor, Read};

/// The largest part (one file inside the archive) unpacked.
pub const MAX_PART: u64 = 128 << 20;
/// The most bytes unpacked from one document, all parts together.
pub const MAX_TOTAL: u64 = 512 << 20;
/// The deepest XML element nesting read. A Word document stays far below: body, table, row,
/// cell, paragraph, run and text are 7 levels, and each table nested in a cell adds 4.
pub const MAX_DEPTH: usize = 256;

/// The OLE compound-file signature: legacy .doc files, and encrypted .docx files (which Word
/// wraps in a compound file).
const CFB_MAGIC: &[u8] = &[0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1];

/// Why a file cannot be read as a DOCX document. The caller names the file.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DocxError {
    /// A 0-byte file.
    #[error("the file is empty (0 bytes)")]
    Empty,
    /// A Word 97-2003 binary document.
    #[error(
        "this is a legacy Word 97-2003 .doc file, not a .docx; open it in Word or LibreOffice and save it as .docx"
    )]
    LegacyDoc,
    /// A password-protected DOCX (an encrypted package inside an OLE compound file).
    #[error("the document is encrypted (password-protected); remove the password in Word and save it again")]
    Encrypted,
    /// Some other OLE compound file (Excel 97, PowerPoint 97, MSI ...).
    #[error("not a DOCX file: it is an OLE compound file that holds no Word document")]
    OtherCompound,
    /// Not a zip archive at all.
    #[error("not a DOCX file: it is not a zip archive ({0})")]
    NotZip(String),
    /// A zip archive that cannot be read: truncated or damaged.
    #[error("damaged or truncated DOCX: {0}")]
    Damaged(String),
    /// A zip archive without a part every DOCX has.
    #[error("not a DOCX file: the archive has no {missing} (it holds {holds})")]
    MissingPart {
        /// The part, e.g. `word/document.xml`.
        missing: String,
        /// A few of the names it does hold.
        holds: String,
    },
    /// A part or the whole archive unpacks to more than the caps allow.
    #[error("refused: {what} unpacks to more than {limit} MiB; this looks like a zip bomb")]
    TooLarge {
        /// The part, or "the archive".
        what: String,
        /// The cap, in MiB.
        limit: u64,
    },
    /// A part nests its XML elements deeper than [`MAX_DEPTH`].
    #[error(
        "refused: {part} nests XML elements more than {limit} deep (tables inside tables, usually); no Word document does, and reading it would overflow the reader's stack"
    )]
    TooDeep {
        /// The part.
        part: String,
        /// The limit that was passed.
        limit: usize,
    },
    /// ISO/IEC 29500 Strict, which docx-rs cannot read.
    #[error(
        "this is a Strict Open XML document, which is not supported; save it in Word as \"Word Document (*.docx)\""
    )]
    Strict,
    /// docx-rs could not parse the XML.
    #[error("cannot parse the document: {0}")]
    Parse(String),
    /// The document parsed but has no text at all.
    #[error("the document contains no text")]
    NoText,
}

/// Checks that `bytes` is a complete, safe DOCX package; returns the path of its main part
/// (almost always `word/document.xml`).
pub fn vet(bytes: &[u8]) -> Result<String, DocxError> {
    vet_with(bytes, MAX_PART, MAX_TOTAL)
}

/// [`vet`] with explicit caps (tests use small ones).
pub fn vet_with(bytes: &[u8], max_part: u64, max_total: u64) -> Result<String, DocxError> {
    if bytes.is_empty() {
        return Err(DocxError::Empty);
    }
    if bytes.starts_with(CFB_MAGIC) {
        return Err(compound_kind(bytes));
    }
    if !bytes.starts_with(b"PK") {
        return Err(DocxError::NotZip(describe_start(bytes)));
    }
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| DocxError::Damaged(zip_reason(&e)))?;
    let mut total = 0u64;
    let mut buf = vec![0u8; 64 << 10];
    for i in 0..archive.len() {
        let mut part = archive.by_index(i).map_err(|e| DocxError::Damaged(zip_reason(&e)))?;
        let name = part.name().to_string();
        if part.is_dir() {
            continue;
        }
        if part.size() > max_part {
            return Err(DocxError::TooLarge { what: format!("part {name}"), limit: max_part >> 20 });
        }
        // Inflate for real: the declared size may lie, and docx-rs must not meet a read error.
        let mut seen = 0u64;
        loop {
            let n = part.read(&mut buf).map_err(|e| DocxError::Damaged(format!("part {name}: {e}")))?;
            if n == 0 {
                break;
            }
            seen += n as u64;
            total += n as u64;
            if seen > max_part {
                return Err(DocxError::TooLarge { what: format!("part {name}"), limit: max_part >> 20 });
            }
            if total > max_total {
                return Err(DocxError::TooLarge { what: "the archive".into(), limit: max_total >> 20 });
            }
        }
        if seen != part.size() {
            return Err(DocxError::Damaged(format!("part {name} holds {seen} bytes but declares {}", part.size())));
        }
    }
    let names: Vec<String> = archive.file_names().map(str::to_string).collect();
    let has = |n: &str| names.iter().any(|x| x.trim_start_matches('/').replace('\\', "/") == n);
    let main = main_part(&mut archive).unwrap_or_else(|| "word/document.xml".to_string());
    for required in ["[Content_Types].xml", "_rels/.rels", main.as_str()] {
        if !has(required) {
            let mut holds: Vec<&str> = names.iter().map(String::as_str).take(6).collect();
            if names.len() > holds.len() {
                holds.push("...");
            }
            let holds = if holds.is_empty() { "nothing".to_string() } else { holds.join(", ") };
            return Err(DocxError::MissingPart { missing: required.to_string(), holds });
        }
    }
    let head = read_part(bytes, &main).unwrap_or_default();
    let head = &head[..head.len().min(4096)];
    if head.windows(STRICT_NS.len()).any(|w| w == STRICT_NS) {
        return Err(DocxError::Strict);
    }
    // Every part that is XML, whatever it is called: docx-rs finds its parts through the
    // relationships, so the main part may be `word/document.XML` or `main.dat`.
    for name in &names {
        let part = archive.by_name(name).map_err(|e| DocxError::Damaged(zip_reason(&e)))?;
        if part.is_dir() {
            continue;
        }
        let mut reader = std::io::BufReader::new(part);
        let head = reader.fill_buf().map_err(|e| DocxError::Damaged(format!("part {name}: {e}")))?;
        let lower = name.to_ascii_lowercase();
        let named_xml = *name == main || lower.ends_with(".xml") || lower.ends_with(".rels");
        let deep = match sniff(head) {
            Some(Encoding::Utf16 { little_endian }) => {
                nesting_exceeds(std::io::BufReader::new(Utf16ToUtf8::new(reader, little_endian)), MAX_DEPTH)
            }
            Some(Encoding::Utf8) => nesting_exceeds(reader, MAX_DEPTH),
            None if named_xml => nesting_exceeds(reader, MAX_DEPTH),
            None => false,
        };
        if deep {
            return Err(DocxError::TooDeep { part: name.clone(), limit: MAX_DEPTH });
        }
    }
    Ok(main)
}

/// How a part that looks like XML is encoded.
#[derive(Debug, PartialEq)]
enum Encoding {
    Utf8,
    Utf16 { little_endian: bool },
}

/// Whether `head` (a part's first bytes) starts as XML does: `<` after an optional byte-order
/// mark and white space, in UTF-8 or UTF-16.
fn sniff(head: &[u8]) -> Option<Encoding> {
    match head {
        [0xFF, 0xFE, ..] | [b'<', 0, ..] => return Some(Encoding::Utf16 { little_endian: true }),
        [0xFE, 0xFF, ..] | [0, b'<', ..] => return Some(Encoding::Utf16 { little_endian: false }),
        _ => {}
    }
    let body = head.strip_prefix(&[0xEF, 0xBB, 0xBF][..]).unwrap_or(head);
    let first = body.iter().find(|b| !b.is_ascii_whitespace())?;
    (*first == b'<').then_some(Encoding::Utf8)
}

/// Reads UTF-16 as UTF-8, for the nesting scan (unpaired surrogates become U+FFFD).
struct Utf16ToUtf8<R> {
    inner: R,
    little_endian: bool,
    carry: Option<u8>,
    out: Vec<u8>,
    at: usize,
}

impl<R: Read> Utf16ToUtf8<R> {
    fn new(inner: R, little_endian: bool) -> Self {
        Utf16ToUtf8 { inner, little_endian, carry: None, out: Vec::new(), at: 0 }
    }
}

impl<R: Read> Read for Utf16ToUtf8<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.out.len() {
            let mut raw = [0u8; 8192];
            let n = self.inner.read(&mut raw)?;
            if n == 0 {
                return Ok(0);
            }
            let mut bytes: Vec<u8> = self.carry.take().into_iter().chain(raw[..n].iter().copied()).collect();
            if bytes.len() % 2 == 1 {
                self.carry = bytes.pop();
            }
            let le = self.little_endian;
            let units = bytes
                .chunks_exact(2)
                .map(|c| if le { u16::from_le_bytes([c[0], c[1]]) } else { u16::from_be_bytes([c[0], c[1]]) });
            self.out.clear();
            self.at = 0;
            for c in char::decode_utf16(units) {
                let mut utf8 = [0u8; 4];
                self.out.extend_from_slice(c.unwrap_or('\u{fffd}').encode_utf8(&mut utf8).as_bytes());
            }
        }
        let n = buf.len().min(self.out.len() - self.at);
        buf[..n].copy_from_slice(&self.out[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Whether the XML read from `xml` nests elements more than `limit` deep. Streams in constant
/// memory and stops at the first element past the limit; XML it cannot parse ends the scan
/// (docx-rs reports that itself).
fn nesting_exceeds(xml: impl std::io::BufRead, limit: usize) -> bool {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_reader(xml);
    reader.config_mut().check_end_names = false;
    let mut buf = Vec::new();
    let mut depth = 0usize;
    loop {
        match reader.read_event_into(&mut buf) {
            Ok(Event::Start(_)) => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            Ok(Event::End(_)) => depth = depth.saturating_sub(1),
            Ok(Event::Eof) | Err(_) => return false,
            Ok(_) => {}
        }
        buf.clear();
    }
}

/// The WordprocessingML namespace of Strict documents.
const STRICT_NS: &[u8] = b"http://purl.oclc.org/ooxml/wordprocessingml/main";

/// Reads one part that [`vet`] has already checked.
pub fn read_part(bytes: &[u8], name: &str) -> Option<Vec<u8>> {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).ok()?;
    let mut part = archive.by_name(name).ok()?;
    let mut out = Vec::new();
    part.read_to_end(&mut out).ok()?;
    Some(out)
}

/// The main document's path from the package relationships, as docx-rs finds it.
fn main_part(archive: &mut zip::ZipArchive<Cursor<&[u8]>>) -> Option<String> {
    let mut rels = String::new();
    archive.by_name("_rels/.rels").ok()?.read_to_string(&mut rels).ok()?;
    let at = rels.find("relationships/officeDocument\"")?;
    // The Target attribute of the same <Relationship> element.
    let start = rels[..at].rfind('<')?;
    let end = at + rels[at..].find('>')?;
    let element = &rels[start..end];
    let t = element.find("Target=\"")? + "Target=\"".len();
    let target = &element[t..t + element[t..].find('"')?];
    Some(target.trim_start_matches('/').to_string())
}

/// What an OLE compound file holds, from its directory's UTF-16 stream names.
fn compound_kind(bytes: &[u8]) -> DocxError {
    let utf16 = |s: &str| s.encode_utf16().flat_map(u16::to_le_bytes).collect::<Vec<u8>>();
    let contains = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    if contains(&utf16("EncryptedPackage")) || contains(&utf16("EncryptionInfo")) {
        DocxError::Encrypted
    } else if contains(&utf16("WordDocument")) {
        DocxError::LegacyDoc
    } else {
        DocxError::OtherCompound
    }
}

/// A short, safe description of a file's first bytes, naming common formats.
fn describe_start(bytes: &[u8]) -> String {
    let known: &[(&[u8], &str)] = &[
        (b"{\\rtf", "it is an RTF document; save it as .docx"),
        (b"%PDF", "it is a PDF"),
        (b"<?xml", "it is a bare XML file; a Word 2003 XML or Flat OPC document must be saved as .docx"),
        (b"<html", "it is an HTML page"),
        (b"<!DOCTYPE", "it is an HTML page"),
    ];
    for (magic, what) in known {
        if bytes.starts_with(magic) {
            return (*what).to_string();
        }
    }
    let head: String = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ");
    format!("it starts with bytes {head}")
}

fn zip_reason(e: &zip::result::ZipError) -> String {
    let s = e.to_string();
    if s.contains("EOCD") || s.contains("end of central directory") || s.contains("Could not find") {
        format!("{s} (the file is probably truncated: download or copy it again)")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn zip_of(parts: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        {
            let mut w = zip::ZipWriter::new(&mut out);
            let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
            for (name, data) in parts {
                w.start_file(*name, opts).expect("start");
                w.write_all(data).expect("write");
            }
            w.finish().expect("finish");
        }
        out.into_inner()
    }

    #[test]
    fn kinds_of_not_docx() {
        assert_eq!(vet(b""), Err(DocxError::Empty));
        assert!(matches!(vet(b"{\\rtf1 hello"), Err(DocxError::NotZip(m)) if m.contains("RTF")));
        assert!(matches!(vet(b"hello world"), Err(DocxError::NotZip(m)) if m.contains("68 65 6c")));
        let mut cfb = CFB_MAGIC.to_vec();
        cfb.extend("WordDocument".encode_utf16().flat_map(u16::to_le_bytes));
        assert_eq!(vet(&cfb), Err(DocxError::LegacyDoc));
        let mut enc = CFB_MAGIC.to_vec();
        enc.extend("EncryptedPackage".encode_utf16().flat_map(u16::to_le_bytes));
        assert_eq!(vet(&enc), Err(DocxError::Encrypted));
    }

    #[test]
    fn zip_without_document_and_truncated_zip() {
        let z = zip_of(&[("hello.txt", b"hi")]);
        assert!(
            matches!(vet(&z), Err(DocxError::MissingPart { missing, holds }) if missing == "[Content_Types].xml" && holds.contains("hello.txt"))
        );
        let z = zip_of(&[("[Content_Types].xml", b"<Types/>"), ("_rels/.rels", b"<Relationships/>")]);
        assert!(matches!(vet(&z), Err(DocxError::MissingPart { missing, .. }) if missing == "word/document.xml"));
        let whole = zip_of(&[("[Content_Types].xml", b"<Types/>"), ("word/document.xml", &[b'a'; 5000])]);
        assert!(matches!(vet(&whole[..whole.len() / 2]), Err(DocxError::Damaged(_))));
    }

    #[test]
    fn deep_nesting_is_refused_before_the_reader_recurses() {
        let nested = |levels: usize| {
            let mut xml = String::from("<w:document><w:body>");
            xml.push_str(&"<w:tbl><w:tr><w:tc>".repeat(levels));
            xml.push_str("<w:p><w:r><w:t>deep</w:t></w:r></w:p>");
            xml.push_str(&"</w:tc></w:tr></w:tbl>".repeat(levels));
            xml.push_str("</w:body></w:document>");
            xml
        };
        let docx = |xml: &str| {
            zip_of(&[
                ("[Content_Types].xml", b"<Types/>"),
                ("_rels/.rels", b"<Relationships/>"),
                ("word/document.xml", xml.as_bytes()),
            ])
        };
        // 16 tables deep is 54 levels: read as usual.
        assert_eq!(vet(&docx(&nested(16))), Ok("word/document.xml".into()));
        let e = vet(&docx(&nested(200_000))).unwrap_err();
        assert_eq!(e, DocxError::TooDeep { part: "word/document.xml".into(), limit: MAX_DEPTH });
        assert!(e.to_string().contains("more than 256 deep"), "{e}");

        // The main part under any name the relationships give it, and in UTF-16.
        let renamed = |main: &str, xml: &[u8]| {
            let rels = format!(
                r#"<Relationships><Relationship Id="r1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="{main}"/></Relationships>"#
            );
            zip_of(&[("[Content_Types].xml", b"<Types/>"), ("_rels/.rels", rels.as_bytes()), (main, xml)])
        };
        let deep = nested(1000);
        let utf16: Vec<u8> = [0xFF, 0xFE].into_iter().chain(deep.encode_utf16().flat_map(u16::to_le_bytes)).collect();
        for (main, xml) in
            [("word/document.XML", deep.as_bytes()), ("main.dat", deep.as_bytes()), ("main.dat", &utf16[..])]
        {
            assert_eq!(
                vet(&renamed(main, xml)),
                Err(DocxError::TooDeep { part: main.into(), limit: MAX_DEPTH }),
                "{main}"
            );
        }
        // Shallow, they pass; a part that is not XML is not scanned.
        assert_eq!(vet(&renamed("main.dat", nested(16).as_bytes())), Ok("main.dat".into()));
        let png = zip_of(&[
            ("[Content_Types].xml", b"<Types/>"),
            ("_rels/.rels", b"<Relationships/>"),
            ("word/document.xml", nested(16).as_bytes()),
            ("word/media/a.png", b"\x89PNG<a><b><c>"),
        ]);
        assert!(vet(&png).is_ok());
    }

    #[test]
    fn parts_are_sniffed_as_xml() {
        assert_eq!(sniff(b"\xEF\xBB\xBF  <?xml"), Some(Encoding::Utf8));
        assert_eq!(sniff(b"\n<w:document"), Some(Encoding::Utf8));
        assert_eq!(sniff(b"\xFF\xFE<\0"), Some(Encoding::Utf16 { little_endian: true }));
        assert_eq!(sniff(b"\0<\0?"), Some(Encoding::Utf16 { little_endian: false }));
        assert_eq!(sniff(b"\x89PNG"), None);
        let be: Vec<u8> = "<a>é𝄞</a>".encode_utf16().flat_map(u16::to_be_bytes).collect();
        let mut text = String::new();
        Utf16ToUtf8::new(&be[..], false).read_to_string(&mut text).unwrap();
        assert_eq!(text, "<a>é𝄞</a>");
    }

    #[test]
    fn bomb_is_refused_within_the_caps() {
        let zeros = vec![0u8; 4 << 20];
        let z = zip_of(&[("word/document.xml", &zeros)]);
        assert!(z.len() < 64 << 10, "deflate squeezes zeros");
        assert!(
            matches!(vet_with(&z, 1 << 20, 8 << 20), Err(DocxError::TooLarge { what, .. }) if what.contains("document.xml"))
        );
        let z = zip_of(&[("a.xml", &zeros), ("b.xml", &zeros), ("c.xml", &zeros)]);
        assert!(
            matches!(vet_with(&z, 8 << 20, 10 << 20), Err(DocxError::TooLarge { what, .. }) if what == "the archive")
        );
    }
}
