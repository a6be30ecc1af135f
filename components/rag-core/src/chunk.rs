//! Splitting text into chunks with `text-splitter`: it cuts at the largest semantic unit that
//! fits (blank lines, then lines, sentences, words, characters).

use serde::{Deserialize, Serialize};
use text_splitter::{Characters, ChunkConfig, ChunkSizer, TextSplitter};

/// How to size chunks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum Chunking {
    /// At most `size` characters, `overlap` of them shared with the previous chunk
    /// (CrewAI: 2500 and 250, [`Chunking::crewai`]).
    Characters {
        /// Maximum characters per chunk.
        size: usize,
        /// Characters shared with the previous chunk.
        overlap: usize,
    },
    /// At most `max_tokens` tokens of the embedder's own tokenizer, so that nothing is cut when
    /// the chunk is embedded; `overlap` tokens shared with the previous chunk. The default
    /// ([`Chunking::for_window`]).
    Tokens {
        /// Maximum tokens per chunk, special tokens excluded.
        max_tokens: usize,
        /// Tokens shared with the previous chunk.
        overlap: usize,
    },
}

/// Why text could not be chunked.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChunkError {
    /// Sizes that cannot work.
    #[error("chunking: {0}")]
    Config(String),
    /// Token mode without a way to count tokens.
    #[error("chunking by tokens needs the embedder's tokenizer")]
    NoTokenizer,
}

/// One chunk of a text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// The chunk's text (trimmed).
    pub text: String,
    /// Byte offset of the chunk in the text it came from.
    pub offset: usize,
}

/// Tokens a text takes in the embedder's window (special tokens excluded).
pub type TokenCount<'a> = &'a dyn Fn(&str) -> usize;

/// A token's byte span `(start, end)` in the text it came from (the embedder's `token-spans`).
pub type TokenSpan = (u32, u32);

/// Counts the tokens of pieces of one text from the text's token spans, tokenised once: sizing
/// a candidate chunk costs a binary search, not a tokenizer run (text-splitter sizes many
/// candidates per chunk).
pub struct SpanCounter<'a> {
    text: &'a str,
    spans: &'a [TokenSpan],
}

impl<'a> SpanCounter<'a> {
    /// The counter for `text`, whose tokens lie at `spans` (in order of their start).
    pub fn new(text: &'a str, spans: &'a [TokenSpan]) -> SpanCounter<'a> {
        SpanCounter { text, spans }
    }

    /// Tokens that overlap `piece`, a slice of the text: a token cut by the piece's edge counts
    /// whole, so a piece is never sized smaller than it tokenises. A string that is not a slice
    /// of the text counts one token per byte, which is never too few either.
    pub fn count(&self, piece: &str) -> usize {
        let (base, at) = (self.text.as_ptr() as usize, piece.as_ptr() as usize);
        if piece.is_empty() {
            return 0;
        }
        if at < base || at + piece.len() > base + self.text.len() {
            return piece.len();
        }
        let (a, b) = (at - base, at - base + piece.len());
        let mut first = self.spans.partition_point(|s| (s.0 as usize) < a);
        if first > 0 && self.spans[first - 1].1 as usize > a {
            first -= 1;
        }
        let last = self.spans.partition_point(|s| (s.0 as usize) < b);
        last.saturating_sub(first)
    }
}

/// Tokens reserved for the special tokens a model adds around a text (BERT: [CLS], [SEP]) and
/// for a prefix (e5: "passage: ").
pub const RESERVED_TOKENS: usize = 8;

impl Chunking {
    /// CrewAI's DOCXSearchTool chunking: 2500 characters, 250 overlap.
    pub fn crewai() -> Chunking {
        Chunking::Characters { size: 2500, overlap: 250 }
    }

    /// The default: chunks that fill an embedder window of `window` tokens, with a tenth of
    /// that as overlap.
    pub fn for_window(window: usize) -> Chunking {
        let max_tokens = window.saturating_sub(RESERVED_TOKENS).max(16);
        Chunking::Tokens { max_tokens, overlap: max_tokens / 10 }
    }

    /// A stable text naming these parameters, part of an index's key.
    pub fn key(&self) -> String {
        match self {
            Chunking::Characters { size, overlap } => format!("chars:{size}/{overlap}"),
            Chunking::Tokens { max_tokens, overlap } => format!("tokens:{max_tokens}/{overlap}"),
        }
    }

    fn check(size: usize, overlap: usize) -> Result<(), ChunkError> {
        if size == 0 {
            return Err(ChunkError::Config("the chunk size must be at least 1".into()));
        }
        if overlap >= size {
            return Err(ChunkError::Config(format!(
                "the overlap ({overlap}) must be smaller than the chunk size ({size})"
            )));
        }
        Ok(())
    }

    /// Checks that the sizes can work (a size of at least 1, an overlap below it).
    pub fn validate(&self) -> Result<(), ChunkError> {
        match *self {
            Chunking::Characters { size, overlap } => Self::check(size, overlap),
            Chunking::Tokens { max_tokens, overlap } => Self::check(max_tokens, overlap),
        }
    }

    /// Splits `text`. `tokens` counts tokens; it is needed in token mode only.
    pub fn split(&self, text: &str, tokens: Option<TokenCount<'_>>) -> Result<Vec<Chunk>, ChunkError> {
        match *self {
            Chunking::Characters { size, overlap } => {
                Self::check(size, overlap)?;
                run(text, size, overlap, Characters)
            }
            Chunking::Tokens { max_tokens, overlap } => {
                Self::check(max_tokens, overlap)?;
                let count = tokens.ok_or(ChunkError::NoTokenizer)?;
                run(text, max_tokens, overlap, Counter(count))
            }
        }
    }
}

struct Counter<'a>(TokenCount<'a>);

impl ChunkSizer for Counter<'_> {
    fn size(&self, chunk: &str) -> usize {
        (self.0)(chunk)
    }
}

/// The most bytes text-splitter sees at once (see [`windows`]).
pub const WINDOW_BYTES: usize = 32 << 10;

fn run<S: ChunkSizer>(text: &str, size: usize, overlap: usize, sizer: S) -> Result<Vec<Chunk>, ChunkError> {
    let config = ChunkConfig::new(size).with_overlap(overlap).map_err(|e| ChunkError::Config(e.to_string()))?;
    let splitter = TextSplitter::new(config.with_sizer(sizer));
    let mut chunks = Vec::new();
    for window in windows(text, WINDOW_BYTES) {
        let base = window.as_ptr() as usize - text.as_ptr() as usize;
        chunks.extend(
            splitter
                .chunk_indices(window)
                .filter(|(_, c)| !c.trim().is_empty())
                .map(|(offset, c)| Chunk { text: c.to_string(), offset: base + offset }),
        );
    }
    Ok(chunks)
}

/// `text` in consecutive pieces of at most `long` bytes that together are the whole of it.
/// A piece ends at a paragraph break (a blank line) where one lies in its second half, else
/// at the end of a line; a line longer than `long` is cut at the last white space before each
/// `long` bytes of it (or at a character boundary, for a line without any).
///
/// Why: text-splitter looks at the whole text it is given again for every chunk it makes, so
/// its cost grows with the text's length squared over the chunk size: a 1 MiB line took 3.9 s
/// to chunk, 4 MiB of short lines 172 ms and 1 MiB of them 12 ms. Given pieces of bounded size,
/// it costs the same per piece: linear in the text. Text up to `long` bytes is one piece,
/// chunked exactly as before; a longer text's chunks differ only where a piece ends, and they
/// end where text-splitter would prefer to cut anyway.
pub fn windows(text: &str, long: usize) -> Vec<&str> {
    let mut cuts = Vec::new();
    let mut piece = 0; // where the current piece starts
    let mut paragraph = None; // the last paragraph break in it
    let mut line_start = 0;
    for line in text.split_inclusive('\n') {
        let end = line_start + line.len();
        if end - piece > long && line_start > piece {
            // This line does not fit: end the piece before it, or at its last paragraph break.
            let at = paragraph.filter(|&p| p - piece > long / 2).unwrap_or(line_start);
            cuts.push(at);
            piece = at;
            paragraph = None;
        }
        while end - piece > long {
            let mut at = piece + long;
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            if at == piece {
                // A bound smaller than one character: the piece is that character.
                at += text[piece..].chars().next().map_or(1, char::len_utf8);
            }
            // After the last white space of the piece (which may take several bytes: U+3000),
            // unless it is too near the start to help.
            let last_space = text[piece..at].char_indices().rev().find(|&(_, c)| c.is_whitespace());
            if let Some((ws, c)) = last_space.filter(|&(w, _)| w > long / 2) {
                at = piece + ws + c.len_utf8();
            }
            cuts.push(at);
            piece = at;
        }
        if line.trim().is_empty() && end > piece {
            paragraph = Some(end);
        }
        line_start = end;
    }
    let mut pieces = Vec::with_capacity(cuts.len() + 1);
    let mut from = 0;
    for cut in cuts {
        pieces.push(&text[from..cut]);
        from = cut;
    }
    if from < text.len() || pieces.is_empty() {
        pieces.push(&text[from..]);
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pieces are at most the bound and together the whole text; short text is one piece;
    /// lines are kept whole, paragraph breaks preferred, and a long line is cut at white space.
    #[test]
    fn pieces_are_bounded_and_nothing_is_lost() {
        let short = "a short line\n".repeat(70);
        assert_eq!(windows(&short, 1000), vec![short.as_str()]);
        let ordinary = "a short line\n".repeat(10_000);
        let pieces = windows(&ordinary, 1000);
        assert_eq!(pieces.concat(), ordinary);
        assert!(pieces.iter().all(|p| p.len() <= 1000 && p.ends_with('\n')));
        let paragraphs = "one line\nand another\n\n".repeat(1000);
        let pieces = windows(&paragraphs, 1000);
        assert_eq!(pieces.concat(), paragraphs);
        assert!(pieces.iter().all(|p| p.len() <= 1000 && p.ends_with("\n\n")));
        assert!(pieces[..pieces.len() - 1].iter().all(|p| p.len() > 500));
        let long = format!("head\n{}\ntail", "word ".repeat(1000));
        let pieces = windows(&long, 1000);
        assert!(pieces.len() >= 5, "{}", pieces.len());
        assert_eq!(pieces.concat(), long);
        assert!(pieces.iter().all(|p| p.len() <= 1000), "{:?}", pieces.iter().map(|p| p.len()).collect::<Vec<_>>());
        assert!(pieces[..pieces.len() - 1].iter().all(|p| p.ends_with(' ') || p.ends_with('\n')));
        // No white space at all, and multi-byte characters: cut at character boundaries.
        let dense = "é".repeat(3000);
        let pieces = windows(&dense, 1001);
        assert_eq!(pieces.concat(), dense);
        assert!(pieces.iter().all(|p| p.len() <= 1001));
        // A bound smaller than a character still ends: a character a piece.
        assert_eq!(windows("ééé", 1), ["é", "é", "é"]);
        // A long line whose white space is the ideographic space (3 bytes): cut after it, whole
        // (the fuzzer's find: cutting one byte after its start split the character).
        let cjk = "段落\u{3000}第二句。".repeat(300);
        let pieces = windows(&cjk, 100);
        assert_eq!(pieces.concat(), cjk);
        assert!(pieces.iter().all(|p| p.len() <= 100));
        assert!(pieces[..pieces.len() - 1].iter().all(|p| p.ends_with('\u{3000}')));
    }

    /// A text of ordinary lines chunks as it did, and a long line's chunks are slices of the
    /// text at their offsets.
    #[test]
    fn chunking_a_long_line_covers_it_with_slices() {
        let text = format!("# Title\n\n{}\nend\n", "many words in a long line. ".repeat(10_000));
        let chunks = Chunking::crewai().split(&text, None).unwrap();
        for c in &chunks {
            assert_eq!(&text[c.offset..c.offset + c.text.len()], c.text);
            assert!(c.text.chars().count() <= 2500);
        }
        assert!(chunks.last().unwrap().text.ends_with("end"));
        assert!(chunks.len() >= text.len() / 2500, "{}", chunks.len());
    }

    fn words(s: &str) -> usize {
        s.split_whitespace().count()
    }

    #[test]
    fn characters_respect_the_size_and_cover_the_text() {
        let para = "The quick brown fox jumps over the lazy dog. ".repeat(20);
        let text = format!("{para}\n\n{para}\n\n{para}");
        let chunks = Chunking::Characters { size: 300, overlap: 30 }.split(&text, None).unwrap();
        assert!(chunks.len() > 3);
        for c in &chunks {
            assert!(c.text.chars().count() <= 300, "{} chars", c.text.chars().count());
            assert_eq!(&text[c.offset..c.offset + c.text.len()], c.text);
        }
        // Every word of the text is in some chunk.
        let end = chunks.last().map(|c| c.offset + c.text.len()).unwrap();
        assert!(end >= text.trim_end().len());
    }

    #[test]
    fn tokens_never_exceed_the_window() {
        let text = "alpha beta gamma delta epsilon. ".repeat(200);
        let chunks = Chunking::Tokens { max_tokens: 50, overlap: 5 }.split(&text, Some(&words)).unwrap();
        assert!(chunks.len() >= 20);
        assert!(chunks.iter().all(|c| words(&c.text) <= 50));
    }

    fn word_spans(text: &str) -> Vec<TokenSpan> {
        let at = |w: &str| (w.as_ptr() as usize - text.as_ptr() as usize) as u32;
        text.split_whitespace().map(|w| (at(w), at(w) + w.len() as u32)).collect()
    }

    /// Sizing from spans gives the chunks that tokenising every candidate gives (which also
    /// shows that text-splitter sizes slices of the text, which the counter relies on).
    #[test]
    fn spans_size_like_a_tokenizer() {
        let text = "alpha beta gamma delta epsilon.\n\nzeta eta theta. iota kappa lambda mu. ".repeat(60);
        let spans = word_spans(&text);
        let counter = SpanCounter::new(&text, &spans);
        let chunking = Chunking::Tokens { max_tokens: 37, overlap: 5 };
        let by_spans = chunking.split(&text, Some(&|s: &str| counter.count(s))).unwrap();
        assert_eq!(by_spans, chunking.split(&text, Some(&words)).unwrap());
        assert!(by_spans.len() > 10);
    }

    /// A token cut by a piece's edge counts whole; a string from elsewhere counts its bytes.
    #[test]
    fn span_counts_at_the_edges() {
        let text = "one two three";
        let spans = word_spans(text);
        let c = SpanCounter::new(text, &spans);
        assert_eq!(c.count(text), 3);
        assert_eq!(c.count(&text[1..9]), 3, "\"ne two t\" touches three words");
        assert_eq!(c.count(&text[3..4]), 0, "a space alone");
        assert_eq!(c.count(&text[4..7]), 1);
        assert_eq!(c.count(""), 0);
        assert_eq!(c.count("elsewhere"), 9);
    }

    #[test]
    fn bad_parameters_and_missing_tokenizer_are_errors() {
        let e = Chunking::Characters { size: 100, overlap: 100 }.split("x", None).unwrap_err();
        assert!(e.to_string().contains("overlap (100) must be smaller"), "{e}");
        assert_eq!(Chunking::Tokens { max_tokens: 10, overlap: 1 }.split("x", None), Err(ChunkError::NoTokenizer));
        assert!(Chunking::Characters { size: 0, overlap: 0 }.split("x", None).is_err());
    }

    #[test]
    fn empty_and_blank_text_give_no_chunks() {
        assert!(Chunking::crewai().split("", None).unwrap().is_empty());
        assert!(Chunking::crewai().split(" \n\n\t ", None).unwrap().is_empty());
    }

    #[test]
    fn keys_differ_by_parameters() {
        assert_ne!(Chunking::crewai().key(), Chunking::for_window(256).key());
        assert_eq!(Chunking::for_window(256), Chunking::Tokens { max_tokens: 248, overlap: 24 });
    }
}
