//! The Markdown chapter tree and chunking (chapter-rag, rag-core): any text gets a tree or an
//! error; every node's ranges, every chunk's range and every chunking window lie in the text.
#![no_main]

use chapter_rag::tree::parse;
use chapter_rag::units::{Params, pieces};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let windows = rag_core::chunk::windows(text, 64);
    assert_eq!(windows.concat(), text);
    assert!(windows.iter().all(|w| w.len() <= 64));
    let Ok(tree) = parse(text, 1000) else { return };
    for n in &tree.nodes {
        assert!(n.own.start <= n.own.end && n.own.end <= text.len(), "{n:?}");
        assert!(n.subtree.start <= n.subtree.end && n.subtree.end <= text.len(), "{n:?}");
        assert!(text.is_char_boundary(n.own.start) && text.is_char_boundary(n.own.end));
    }
    let params = Params { size: 120, overlap: 20, min_chapter_chars: 40 };
    if let Ok(pieces) = pieces(text, &tree, &params) {
        for p in pieces {
            assert!(p.range.end <= text.len() && p.chapter < tree.nodes.len(), "{p:?}");
        }
    }
});
