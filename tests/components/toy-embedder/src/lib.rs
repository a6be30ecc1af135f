//! A deterministic toy embedder for host tests: hashes word trigrams into
//! `dimension` buckets and L2-normalises. Not a language model; it exists to
//! test how the host links a tool's `embedder` import to an embedder component.
//!
//! Config: `{"dimension": 8, "max_tokens": 16, "model_id": "toy", "delay_ms": 0}` (all
//! optional). A text of more than `max_tokens` words is truncated and flagged. With
//! `delay_ms`, each `embed` call first waits that long on the clock (a host call), so tests can
//! make the pool busy. With `"bad_spans": true`, `token-spans` answers spans past the end of
//! each text, as a faulty embedder might (the host must refuse them); with
//! `"short_answers": true`, `embed` answers one vector fewer than it was given texts. Hostile
//! answers, for the host's bounds: `"wide_answers": N` answers vectors of N floats whatever
//! the dimension; `"alias_floats": N` answers vectors of N floats that all share one buffer
//! (what the host lifts is then texts × N floats, from N floats of guest memory);
//! `"empty_spans": N` answers N empty spans for every text.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "embedding-model",
    generate_all,
});

use std::cell::RefCell;

use exports::quarry::retrieval::embedder::{
    EmbedError, Embedding, Guest as EmbedderGuest, InputKind, ModelInfo, TokenSpan,
};
use exports::quarry::retrieval::model::Guest as ModelGuest;

struct Component;

thread_local! {
    static INFO: RefCell<Option<ModelInfo>> = const { RefCell::new(None) };
    static DELAY_MS: RefCell<u64> = const { RefCell::new(0) };
    static BAD_SPANS: RefCell<bool> = const { RefCell::new(false) };
    static SHORT_ANSWERS: RefCell<bool> = const { RefCell::new(false) };
    static HOSTILE: RefCell<Hostile> = const { RefCell::new(Hostile { wide: 0, alias: 0, empty_spans: 0 }) };
}

/// The hostile answers asked for in the config (0: off).
struct Hostile {
    wide: usize,
    alias: usize,
    empty_spans: usize,
}

impl ModelGuest for Component {
    fn load(config: String) -> Result<ModelInfo, EmbedError> {
        let cfg: serde_json::Value =
            serde_json::from_str(&config).map_err(|e| EmbedError::InvalidInput(format!("config is not JSON: {e}")))?;
        let get = |k: &str, d: u64| cfg.get(k).and_then(|v| v.as_u64()).unwrap_or(d) as u32;
        let info = ModelInfo {
            id: cfg.get("model_id").and_then(|v| v.as_str()).unwrap_or("toy-trigram").to_string(),
            dimension: get("dimension", 8),
            max_tokens: get("max_tokens", 16),
        };
        if info.dimension == 0 {
            return Err(EmbedError::InvalidInput("dimension must be at least 1".into()));
        }
        INFO.with(|i| *i.borrow_mut() = Some(info.clone()));
        DELAY_MS.with(|d| *d.borrow_mut() = cfg.get("delay_ms").and_then(|v| v.as_u64()).unwrap_or(0));
        BAD_SPANS.with(|b| *b.borrow_mut() = cfg.get("bad_spans").and_then(|v| v.as_bool()).unwrap_or(false));
        SHORT_ANSWERS.with(|b| *b.borrow_mut() = cfg.get("short_answers").and_then(|v| v.as_bool()).unwrap_or(false));
        let n = |k: &str| cfg.get(k).and_then(|v| v.as_u64()).unwrap_or(0) as usize;
        HOSTILE.with(|h| {
            *h.borrow_mut() =
                Hostile { wide: n("wide_answers"), alias: n("alias_floats"), empty_spans: n("empty_spans") }
        });
        Ok(info)
    }
}

impl EmbedderGuest for Component {
    fn info() -> ModelInfo {
        INFO.with(|i| i.borrow().clone()).unwrap_or(ModelInfo { id: "unloaded".into(), dimension: 0, max_tokens: 0 })
    }

    fn embed(texts: Vec<String>, kind: InputKind) -> Result<Vec<Embedding>, EmbedError> {
        let info =
            INFO.with(|i| i.borrow().clone()).ok_or_else(|| EmbedError::Unavailable("model not loaded".into()))?;
        let delay = DELAY_MS.with(|d| *d.borrow());
        if delay > 0 {
            wasi::clocks::monotonic_clock::subscribe_duration(delay * 1_000_000).block();
        }
        let prefix = match kind {
            InputKind::Query => "q",
            InputKind::Document => "d",
        };
        let (wide, alias) = HOSTILE.with(|h| (h.borrow().wide, h.borrow().alias));
        if alias > 0 {
            // Every answer's list points at the same floats: the canonical ABI lowers each Vec
            // as its pointer and length, so nothing is copied here.
            let shared: &'static mut [f32] = Box::leak(vec![0.5f32; alias].into_boxed_slice());
            let ptr = shared.as_mut_ptr();
            return Ok(texts
                .iter()
                // SAFETY: deliberately unsound (the lists alias and are freed after the call,
                // if ever): this component attacks the host.
                .map(|_| Embedding { vector: unsafe { Vec::from_raw_parts(ptr, alias, alias) }, truncated: false })
                .collect());
        }
        if wide > 0 {
            return Ok(texts.iter().map(|_| Embedding { vector: vec![0.5; wide], truncated: false }).collect());
        }
        let answered = if SHORT_ANSWERS.with(|s| *s.borrow()) { texts.len().saturating_sub(1) } else { texts.len() };
        Ok(texts[..answered]
            .iter()
            .map(|t| {
                let words: Vec<&str> = t.split_whitespace().collect();
                let truncated = words.len() > info.max_tokens as usize;
                let words = &words[..words.len().min(info.max_tokens as usize)];
                let mut v = vec![0f32; info.dimension as usize];
                for w in words {
                    let chars: Vec<char> = format!("#{}#", w.to_lowercase()).chars().collect();
                    for tri in chars.windows(3) {
                        let mut h: u64 = 0xcbf29ce484222325;
                        for c in tri {
                            h = (h ^ *c as u64).wrapping_mul(0x100000001b3);
                        }
                        v[(h % info.dimension as u64) as usize] += 1.0;
                    }
                }
                let _ = prefix; // both kinds embed alike here
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                if norm > 0.0 {
                    v.iter_mut().for_each(|x| *x /= norm);
                }
                Embedding { vector: v, truncated }
            })
            .collect())
    }

    /// One token per whitespace-separated word, the unit `embed` truncates at.
    fn count_tokens(texts: Vec<String>) -> Result<Vec<u32>, EmbedError> {
        Ok(texts.iter().map(|t| t.split_whitespace().count() as u32).collect())
    }

    /// The byte span of each whitespace-separated word.
    fn token_spans(texts: Vec<String>) -> Result<Vec<Vec<TokenSpan>>, EmbedError> {
        let empty = HOSTILE.with(|h| h.borrow().empty_spans);
        if empty > 0 {
            return Ok(texts.iter().map(|_| vec![TokenSpan { start: 0, end: 0 }; empty]).collect());
        }
        let shift = if BAD_SPANS.with(|b| *b.borrow()) { 1 << 20 } else { 0 };
        Ok(texts
            .iter()
            .map(|t| {
                t.split_whitespace()
                    .map(|w| {
                        let start = (w.as_ptr() as usize - t.as_ptr() as usize) as u32 + shift;
                        TokenSpan { start, end: start + w.len() as u32 }
                    })
                    .collect()
            })
            .collect())
    }
}

export!(Component);
