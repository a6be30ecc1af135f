//! DOCX vetting and extraction (docx-text): any bytes are refused with an error or read; no
//! panic, and what is read has text.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(doc) = docx_text::extract::extract(data) {
        assert!(!doc.blocks.is_empty());
    }
});
