//! The tools natively, with a fake embedder (hashed bag of words): tree, chapters, routing,
//! in-chapter search, citations, bad input, and incremental, all-or-nothing rebuilds.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use rag_core::corpus::{Corpus, MemoryCorpus, Shape};

use chapter_rag::tool::{BaseEnv, ChapterTool, Env, Model, ToolError};
use serde_json::{Value, json};
use tool_guest::catalog::{Block, Body, Target};
use tool_guest::tool::{Ask, AskError};

#[derive(Default)]
struct Fake {
    files: RefCell<HashMap<String, Vec<u8>>>,
    embedded: Cell<usize>,
    counted: Cell<usize>,
    fail_embed: Cell<bool>,
    stamps: Cell<u128>,
    /// The "host's" corpora, shared by every instance opened on this environment.
    corpora: RefCell<HashMap<String, Rc<MemoryCorpus>>>,
    /// What the "client's model" answers a sampling question (none: the client offers none).
    model_says: RefCell<Option<Result<String, AskError>>>,
    /// What it answers the question of a key, where it answers that one otherwise.
    model_says_to: RefCell<HashMap<String, String>>,
    /// The sampling questions asked, by key.
    sampled: RefCell<Vec<(String, Value)>>,
}

impl Fake {
    fn put(&self, path: &str, text: &str) {
        self.files.borrow_mut().insert(path.into(), text.as_bytes().to_vec());
        self.stamps.set(self.stamps.get() + 1);
    }
}

fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

impl BaseEnv for Fake {
    fn model(&self) -> Model {
        Model { id: "fake/bow".into(), dimension: 64, max_tokens: 512 }
    }
    fn embed(&self, texts: &[String], query: bool) -> Result<Vec<Vec<f32>>, ToolError> {
        if self.fail_embed.get() {
            return Err(ToolError::Upstream("the embedder is down".into()));
        }
        if !query {
            self.embedded.set(self.embedded.get() + texts.len());
        }
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0f32; 64];
                for w in words(t) {
                    let h = w.bytes().fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64));
                    v[(h % 64) as usize] += 1.0;
                }
                let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
                v.into_iter().map(|x| x / n).collect()
            })
            .collect())
    }
    fn count_tokens(&self, texts: &[String]) -> Result<Vec<u32>, ToolError> {
        self.counted.set(self.counted.get() + texts.len());
        Ok(texts.iter().map(|t| words(t).len() as u32).collect())
    }
    fn token_spans(&self, texts: &[String]) -> Result<Vec<Vec<(u32, u32)>>, ToolError> {
        // The words `words` counts, where they lie.
        let spans = |t: &str| {
            let at = |w: &str| (w.as_ptr() as usize - t.as_ptr() as usize) as u32;
            t.split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .map(|w| (at(w), at(w) + w.len() as u32))
                .collect()
        };
        Ok(texts.iter().map(|t| spans(t)).collect())
    }
    fn read_file(&self, path: &str, max_bytes: u64) -> Result<Vec<u8>, ToolError> {
        let files = self.files.borrow();
        let b = files.get(path).ok_or_else(|| ToolError::NotFound(format!("File does not exist: {path}")))?;
        if b.len() as u64 > max_bytes {
            return Err(ToolError::InvalidArgs(format!("{path} is too large")));
        }
        Ok(b.clone())
    }
    fn log(&self, _: &str) {}
    fn progress(&self, _: &str, _: u64, _: u64, _: &str) {}
    fn open_corpus(&self, name: &str, shape: Shape) -> Result<Rc<dyn Corpus>, ToolError> {
        let mut corpora = self.corpora.borrow_mut();
        let c = corpora.entry(name.to_string()).or_insert_with(|| Rc::new(MemoryCorpus::new(shape).unwrap()));
        if c.snapshot().shape() != shape {
            return Err(ToolError::InvalidConfig(format!("corpus {name} holds another shape")));
        }
        Ok(c.clone())
    }
    fn ask(&self, key: &str, kind: Ask, params: &Value) -> Result<Value, AskError> {
        assert_eq!(kind, Ask::Sampling);
        self.sampled.borrow_mut().push((key.to_string(), params.clone()));
        let to_key = self.model_says_to.borrow().get(key).cloned();
        match to_key.map(Ok).or_else(|| self.model_says.borrow().clone()) {
            None => Err(AskError::Unsupported("no sampling".into())),
            Some(Ok(text)) => Ok(json!({"role": "assistant", "content": {"type": "text", "text": text}, "model": "m"})),
            Some(Err(e)) => Err(e),
        }
    }
}

impl Env for Fake {
    fn stamp(&self, path: &str) -> Option<(u64, u128)> {
        self.files.borrow().get(path).map(|b| (b.len() as u64, self.stamps.get()))
    }
}

fn filler(topic: &str, n: usize) -> String {
    format!("This paragraph explains {topic} in some detail for the reader. ").repeat(n)
}

fn manual() -> String {
    format!(
        "# Installing\n\n{}\n\n## On Linux\n\n{}\n\n## On Windows\n\n{}\n\n# Syncing\n\n{}\n\n## Bandwidth limits\n\nUse --bwlimit to cap bandwidth with a timetable. {}\n\n## Filters\n\n{}\n",
        filler("installation packages", 20),
        filler("linux apt packages", 20),
        filler("windows installer exe", 20),
        filler("syncing directories", 20),
        filler("bandwidth throttle", 20),
        filler("include exclude filter rules", 20),
    )
}

fn open(env: &Fake) -> ChapterTool {
    ChapterTool::open(&json!({"manual": "/docs/m.md", "similarity_threshold": 0.0}).to_string(), env).unwrap()
}

fn call(t: &mut ChapterTool, env: &Fake, tool: &str, args: Value) -> Result<chapter_rag::tool::Output, ToolError> {
    t.call(env, tool, &args.to_string())
}

#[test]
fn tree_chapter_route_search_and_citations() {
    let env = Fake::default();
    env.put("/docs/m.md", &manual());
    let mut t = open(&env);
    assert_eq!(t.specs().len(), 6);
    for spec in t.specs() {
        let s: Value = serde_json::from_str(&spec.schema_text()).unwrap();
        assert_eq!(s["type"], "object");
    }
    // Defaults print as written: an f32 0.55 is not shown as 0.550000011920929.
    let defaults = ChapterTool::open(&json!({"manual": "/docs/m.md"}).to_string(), &env).unwrap();
    let spec = defaults.specs().into_iter().find(|s| s.name == "search_chapter_content").unwrap().schema_text();
    assert!(spec.contains(r#""default":0.55,"#), "{spec}");
    let tree = call(&mut t, &env, "list_chapter_tree", json!({})).unwrap();
    assert!(tree.text.contains("1 Installing") && tree.text.contains("  2.1 Bandwidth limits"), "{}", tree.text);
    let top = call(&mut t, &env, "list_chapter_tree", json!({"level": 1})).unwrap();
    assert!(!top.text.contains("2.1") && top.text.contains("2 sections below"), "{}", top.text);
    let under = call(&mut t, &env, "list_chapter_tree", json!({"under": "2"})).unwrap();
    assert!(under.text.starts_with("2.1 Bandwidth limits"), "{}", under.text);

    let ch = call(&mut t, &env, "get_chapter", json!({"chapter_id": "2.1"})).unwrap();
    assert!(ch.text.starts_with("Chapter 2.1 Bandwidth limits\nParent: 2 Syncing"), "{}", ch.text);
    assert!(ch.text.contains("--bwlimit"));

    let route =
        call(&mut t, &env, "route", json!({"question": "how do I limit bandwidth with bwlimit timetable"})).unwrap();
    let r: Value = serde_json::from_str(&route.text).unwrap();
    assert!(r["chapters"][0]["chapter_id"].as_str().unwrap().starts_with('2'), "{r}");
    assert!(r["confidence"].as_f64().unwrap() > 0.0 && !r["reason"].as_str().unwrap().is_empty());

    let found = call(
        &mut t,
        &env,
        "search_chapter_content",
        json!({"chapter_id": "2", "query": "bwlimit timetable", "top_k": 3}),
    )
    .unwrap();
    let rows: Value = serde_json::from_str(&found.text).unwrap();
    assert_eq!(rows[0]["chapter_id"], "2.1", "{rows}");
    // Scores and confidences print as f32s are written, not widened (0.1, not 0.10000000149011612).
    // An f32 has at most 9 significant digits; a widened one prints 16 or 17.
    let widened = |t: &str| {
        t.split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .any(|w| w.split_once('.').is_some_and(|(_, d)| d.len() >= 10))
    };
    for text in [&route.text, &found.text] {
        assert!(!widened(text), "{text}");
    }
    assert!(found.hits.iter().all(|h| chapter(h).starts_with('2')));
    // Inside chapter 1 there is no bandwidth text: whatever comes back is from chapter 1.
    let other =
        call(&mut t, &env, "search_chapter_content", json!({"chapter_ids": ["1.1"], "query": "bwlimit"})).unwrap();
    assert!(other.hits.iter().all(|h| chapter(h) == "1.1"));

    let s = call(&mut t, &env, "search", json!({"question": "bandwidth throttle bwlimit"})).unwrap();
    assert!(s.text.starts_with("Routed to: 2"), "{}", s.text);
    assert!(!s.hits.is_empty() && s.hits.len() <= 10);
    assert!(s.text.contains("Syncing > Bandwidth limits"));

    let v = call(&mut t, &env, "validate_citations", json!({"cited": ["2.1"], "candidates": ["2"]})).unwrap();
    assert_eq!(v.extra["valid"], true);
    let v = call(&mut t, &env, "validate_citations", json!({"cited": ["1.1", "9"], "candidates": ["2"]})).unwrap();
    assert_eq!(v.extra["valid"], false);
    assert_eq!(v.extra["cited"][1]["valid"], false);
}

/// A manual with one top-level heading (a title above its sections, as most documents have)
/// routes among the chapters under the title, where the tree first branches, and says so; not
/// to the title, which holds everything.
#[test]
fn a_manual_under_one_title_routes_among_its_sections() {
    let env = Fake::default();
    let demoted: String =
        manual().lines().map(|l| if l.starts_with('#') { format!("#{l}\n") } else { format!("{l}\n") }).collect();
    env.put("/docs/m.md", &format!("# The guide\n\n{}\n\n{demoted}", filler("what this guide covers", 3)));
    let mut t = open(&env);
    let route =
        call(&mut t, &env, "route", json!({"question": "how do I limit bandwidth with bwlimit timetable"})).unwrap();
    let r: Value = serde_json::from_str(&route.text).unwrap();
    let first = r["chapters"][0]["chapter_id"].as_str().unwrap();
    assert!(first == "1.2" || first.starts_with("1.2."), "{r}");
    let reason = r["reason"].as_str().unwrap();
    assert!(reason.contains("routed among the 2 level-2 chapters of 1 \"The guide\""), "{reason}");
    let s = call(&mut t, &env, "search", json!({"question": "bandwidth throttle bwlimit"})).unwrap();
    assert!(s.text.starts_with("Routed to: 1.2"), "{}", s.text);
}

#[test]
fn bad_ids_questions_and_arguments() {
    let env = Fake::default();
    env.put("/docs/m.md", &manual());
    let mut t = open(&env);
    let e = call(&mut t, &env, "get_chapter", json!({"chapter_id": "2.9"})).unwrap_err();
    match e {
        ToolError::NotFound(m) => assert!(m.contains("nearest ids are 2.1, 2.2") || m.contains("2.2, 2.1"), "{m}"),
        e => panic!("{e:?}"),
    }
    for (tool, args) in [
        ("route", json!({"question": "  "})),
        ("search", json!({"question": ""})),
        ("search_chapter_content", json!({"chapter_id": "1", "query": ""})),
        ("search_chapter_content", json!({"query": "x"})),
        ("search", json!({"question": "x", "limit": 50})),
        ("list_chapter_tree", json!({"level": 0})),
        ("route", json!({"question": "x", "extra": 1})),
    ] {
        assert!(matches!(call(&mut t, &env, tool, args.clone()), Err(ToolError::InvalidArgs(_))), "{tool} {args}");
    }
    assert!(matches!(t.call(&env, "route", "not json"), Err(ToolError::InvalidArgs(_))));
    assert!(matches!(t.call(&env, "nope", "{}"), Err(ToolError::NotFound(_))));
}

#[test]
fn bad_manuals_are_refused_at_open() {
    let env = Fake::default();
    let open = |cfg: Value| ChapterTool::open(&cfg.to_string(), &env).err().expect("should fail");
    env.put("/docs/empty.md", "  \n\n");
    assert!(open(json!({"manual": "/docs/empty.md"})).to_string().contains("empty"));
    env.put("/docs/big.md", &"x".repeat(2048));
    assert!(open(json!({"manual": "/docs/big.md", "max_bytes": 1024})).to_string().contains("too large"));
    env.put("/docs/many.md", &"# h\n\ntext\n\n".repeat(10_000));
    let e = open(json!({"manual": "/docs/many.md"}));
    assert!(
        matches!(e, ToolError::InvalidConfig(ref m) if m.contains("10000 headings") && m.contains("max_headings")),
        "{e}"
    );
    env.put("/docs/m.pdf", "x");
    assert!(open(json!({"manual": "/docs/m.pdf"})).to_string().contains("convert it to Markdown"));
    assert!(matches!(open(json!({"manual": "/docs/missing.md"})), ToolError::NotFound(_)));
    assert!(
        open(json!({"manual": "/docs/m.md", "fragments": 20}))
            .to_string()
            .contains("fragments must be within 8 and 12")
    );
    assert!(
        open(json!({"manual": "/docs/m.md", "chunk_size": 100, "chunk_overlap": 100})).to_string().contains("overlap")
    );
    assert!(open(json!({"manual": "/docs/m.md", "bogus": 1})).to_string().contains("unknown field"));
}

#[test]
fn an_edit_reembeds_only_what_changed_and_a_failed_rebuild_keeps_the_old_index() {
    let env = Fake::default();
    env.put("/docs/m.md", &manual());
    let mut t = open(&env);
    let first = env.embedded.get();
    assert_eq!(first, t.report().chunks);
    let counted = env.counted.get();
    // Edit one chapter.
    env.put("/docs/m.md", &manual().replace("windows installer exe", "windows msi package"));
    let out = call(&mut t, &env, "list_chapter_tree", json!({})).unwrap();
    let report = &out.extra["report"];
    let embedded = env.embedded.get() - first;
    assert!(embedded > 0 && embedded < first / 2, "re-embedded {embedded} of {first}");
    // Token counts of unchanged text come from the previous index.
    let recounted = env.counted.get() - counted;
    assert!(recounted > 0 && recounted < first / 2, "counted {recounted} of {first} again");
    assert_eq!(report["embedded"], embedded);
    assert_eq!(report["reused"].as_u64().unwrap() as usize + embedded, report["chunks"].as_u64().unwrap() as usize);

    // A broken edit (and an embedder that fails) keeps the previous index serving.
    env.fail_embed.set(true);
    env.put("/docs/m.md", &format!("{}\n# New chapter\n\nfresh text here\n", manual()));
    env.fail_embed.set(false);
    env.put("/docs/m.md", "");
    let out = call(&mut t, &env, "list_chapter_tree", json!({})).unwrap();
    assert!(out.text.contains("2.1 Bandwidth limits"));
    assert!(out.extra["stale_index"].as_str().unwrap().contains("previous version"), "{}", out.extra);
}

#[test]
fn a_chinese_manual_builds_with_lines_on_multibyte_text() {
    let env = Fake::default();
    let para = "所有权是 Rust 最为与众不同的特性，它让 Rust 无需垃圾回收即可保障内存安全。".repeat(30);
    env.put("/docs/m.md", &format!("# 所有权\n\n{para}\n\n## 借用\n\n{para}\n"));
    let mut t = open(&env);
    let out = call(&mut t, &env, "search_chapter_content", json!({"chapter_id": "1", "query": "所有权", "top_k": 50}))
        .unwrap();
    assert!(out.hits.len() >= 2);
    for h in &out.hits {
        let (first, last) = h.location.as_ref().and_then(|l| l.lines).unwrap();
        assert!(first >= 1 && first <= last, "{:?}", h.location);
    }
}

/// Two instances over one corpus: the second reopens the first's build without embedding or
/// counting anything, both answer the same, and an edit seen by one is served to both once
/// the other has looked at the manual.
#[test]
fn instances_share_a_corpus_and_build_it_once() {
    let env = Fake::default();
    env.put("/docs/m.md", &manual());
    let config = json!({"manual": "/docs/m.md", "corpus": "manual", "similarity_threshold": 0.0}).to_string();
    let mut a = ChapterTool::open(&config, &env).unwrap();
    let (embedded, counted) = (env.embedded.get(), env.counted.get());
    assert!(embedded > 0);
    let mut b = ChapterTool::open(&config, &env).unwrap();
    assert_eq!((env.embedded.get(), env.counted.get()), (embedded, counted), "the second instance built nothing");
    assert_eq!(b.report().reused, a.report().chunks);
    let q = json!({"question": "how do I limit bandwidth with bwlimit timetable"});
    let (ra, rb) = (call(&mut a, &env, "search", q.clone()).unwrap(), call(&mut b, &env, "search", q.clone()).unwrap());
    assert_eq!(ra.text, rb.text);
    assert!(ra.text.contains("Bandwidth limits"), "{}", ra.text);
    let corpus = env.corpora.borrow()["manual"].clone();
    let chunks = corpus.info().unwrap().chunks;
    assert_eq!(chunks as usize, a.report().chunks);

    // An edit: one instance rebuilds (the changed chunks only), the other reopens its build.
    env.put("/docs/m.md", &manual().replace("cap bandwidth", "cap the bandwidth of transfers"));
    let before = env.embedded.get();
    let ra = call(&mut a, &env, "search", q.clone()).unwrap();
    let embedded_once = env.embedded.get() - before;
    assert!(embedded_once > 0 && embedded_once < chunks as usize, "{embedded_once} of {chunks}");
    let rb = call(&mut b, &env, "search", q.clone()).unwrap();
    assert_eq!(env.embedded.get() - before, embedded_once, "the second instance reopened the first's build");
    assert_eq!(ra.text, rb.text);
    assert!(ra.text.contains("cap the bandwidth of transfers"), "{}", ra.text);
    // The earlier build's chunks left the corpus in the commit that brought the new ones.
    assert_eq!(corpus.info().unwrap().chunks as usize, a.report().chunks);

    // A corpus of another shape is refused at prepare, saying so.
    env.corpora.borrow_mut().insert(
        "other".into(),
        Rc::new(MemoryCorpus::new(Shape { dimension: 3, metric: rag_core::corpus::Metric::Cosine }).unwrap()),
    );
    let other = json!({"manual": "/docs/m.md", "corpus": "other"}).to_string();
    let e = ChapterTool::open(&other, &env).err().unwrap();
    assert!(matches!(&e, ToolError::InvalidConfig(m) if m.contains("another shape")), "{e:?}");
}

#[test]
fn route_asks_the_clients_model_and_falls_back_to_embeddings() {
    let env = Fake::default();
    env.put("/docs/m.md", &manual());
    let mut t = open(&env);
    let q = json!({"question": "How do I cap the bandwidth?"});
    // No sampling: the embedding route, as before, and one question was tried.
    let plain = call(&mut t, &env, "route", q.clone()).unwrap();
    assert!(!plain.extra["reason"].as_str().unwrap().contains("client's model"), "{}", plain.extra);
    assert_eq!(env.sampled.borrow().len(), 1);
    let (key, params) = env.sampled.borrow()[0].clone();
    let asked = params["messages"][0]["content"]["text"].as_str().unwrap().to_string();
    assert_eq!(key, "route");
    assert!(
        asked.contains("1 Installing")
            && asked.contains("  2.1 Bandwidth limits")
            && asked.contains("cap the bandwidth"),
        "{asked}"
    );
    assert!(params["systemPrompt"].as_str().unwrap().starts_with("You are Router"), "{params}");
    // The model names 2.1 (and an id the manual lacks, dropped): that is the route.
    *env.model_says.borrow_mut() =
        Some(Ok("Sure: ```{\"chapters\": [\"2.1\", \"9.9\"], \"confidence\": 0.7, \"reason\": \"limits\"}```".into()));
    let ids = |route: &Value| -> Vec<String> {
        route["chapters"].as_array().unwrap().iter().map(|c| c["chapter_id"].as_str().unwrap().to_string()).collect()
    };
    let by_embeddings = ids(&plain.extra);
    let routed = call(&mut t, &env, "route", q.clone()).unwrap();
    // The model's pick first (the embeddings rank its chapter too), then the embeddings' own.
    let fused = ids(&routed.extra);
    assert_eq!(fused[0], "2.1", "{}", routed.extra);
    assert!(fused[1..].iter().all(|id| by_embeddings.contains(id)), "{fused:?} beside {by_embeddings:?}");
    assert_eq!(routed.extra["routed_by"], "client_model_and_embeddings", "{}", routed.extra);
    // What the model said is reported as its own, beside the route's calibrated confidence.
    assert_eq!(routed.extra["model"], json!({"chapters": ["2.1"], "confidence": 0.7, "reason": "limits"}));
    assert!(
        routed.extra["reason"].as_str().unwrap().starts_with(
            "the client's model named 2.1 (its own confidence 0.70, uncalibrated: limits); fused with the embeddings"
        ),
        "{}",
        routed.extra
    );
    // Nothing usable: the embeddings route, and a field says why.
    *env.model_says.borrow_mut() = Some(Ok("I think chapter nine".into()));
    let fallback = call(&mut t, &env, "route", q.clone()).unwrap();
    assert_eq!(fallback.extra["routed_by"], "embeddings");
    assert_eq!(fallback.extra["fallback"], "the client's model did not answer with JSON", "{}", fallback.extra);
    // A 2026 client answers in the next round: the call ends now.
    *env.model_says.borrow_mut() = Some(Err(AskError::Pending));
    assert!(call(&mut t, &env, "route", q).is_err());
}

/// Scripted models as the held-out measurement met them: one that copies the format's example
/// (its id is no id a manual can have, so nothing is routed there), one that invents an id, and
/// one that names a chapter past where the tree used to be cut (every top-level chapter is
/// shown now). `search` routes the same way as `route`, and says which route answered.
#[test]
fn the_clients_model_is_shown_every_chapter_and_its_mistakes_fall_back() {
    let env = Fake::default();
    let chapters: String = (1..=420)
        .map(|k| {
            let topic = if k == 417 { "tape archive retention".to_string() } else { format!("subject{k} material{k}") };
            // Chapter 417 has twelve sections, which the tree cannot show beside 420 chapters.
            let sections: String = if k == 417 {
                (1..=12)
                    .map(|j| format!("## Tape rule {j}\n\n{}\n\n", filler(&format!("tape rule{j} detail{j}"), 12)))
                    .collect()
            } else {
                String::new()
            };
            format!("# Chapter {k}\n\n{}\n\n{sections}", filler(&topic, 12))
        })
        .collect();
    env.put("/docs/m.md", &chapters);
    let mut t = open(&env);
    let q = json!({"question": "how long is a tape archive kept"});
    *env.model_says.borrow_mut() = Some(Ok(r#"{"chapters": ["ID", "ID"], "confidence": 0.5, "reason": "..."}"#.into()));
    let copied = call(&mut t, &env, "route", q.clone()).unwrap();
    assert_eq!(copied.extra["routed_by"], "embeddings", "{}", copied.extra);
    assert!(copied.extra["fallback"].as_str().unwrap().contains("named no chapter of the manual"), "{}", copied.extra);
    let asked = env.sampled.borrow().last().unwrap().1["messages"][0]["content"]["text"].as_str().unwrap().to_string();
    assert!(
        asked.contains("\n416 Chapter 416\n") && asked.contains("\n420 Chapter 420"),
        "every top-level chapter is shown: {asked}"
    );
    assert!(!asked.contains("\"3.4\""), "no example id a manual can have: {asked}");

    *env.model_says.borrow_mut() = Some(Ok(r#"{"chapters": ["7.7"], "confidence": 0.9, "reason": "made up"}"#.into()));
    let invented = call(&mut t, &env, "route", q.clone()).unwrap();
    assert_eq!(invented.extra["routed_by"], "embeddings");
    assert!(invented.extra["fallback"].as_str().unwrap().contains("[\"7.7\"]"), "{}", invented.extra);

    // Chapter 417, past the old cut, hides twelve sections: the model is asked again inside it,
    // and names one; a second answer outside the chapter would keep the chapter.
    assert!(asked.contains("\n417 Chapter 417 (+12 sections)\n"), "{asked}");
    *env.model_says.borrow_mut() = Some(Ok(r#"{"chapters": ["417"], "confidence": 0.8, "reason": "tapes"}"#.into()));
    env.model_says_to
        .borrow_mut()
        .insert("route.within".into(), r#"{"chapters": ["417.5"], "reason": "rule 5"}"#.into());
    let late = call(&mut t, &env, "route", q.clone()).unwrap();
    assert_eq!(late.extra["routed_by"], "client_model_and_embeddings");
    assert_eq!(late.extra["chapters"][0]["chapter_id"], "417.5", "{}", late.extra);
    let (key, within) = env.sampled.borrow().last().unwrap().clone();
    let within = within["messages"][0]["content"]["text"].as_str().unwrap().to_string();
    assert!(key == "route.within" && within.contains("  417.12 Tape rule 12"), "{key}: {within}");
    env.model_says_to.borrow_mut().insert("route.within".into(), r#"{"chapters": ["2"]}"#.into());
    let kept = call(&mut t, &env, "route", q.clone()).unwrap();
    assert_eq!(kept.extra["chapters"][0]["chapter_id"], "417", "{}", kept.extra);

    let s = call(&mut t, &env, "search", json!({"question": "how long is a tape archive kept"})).unwrap();
    assert_eq!(s.extra["route"]["routed_by"], "client_model_and_embeddings", "{}", s.extra);
    assert!(s.text.contains("Routed by: the client's model and the embeddings"), "{}", s.text);
    *env.model_says.borrow_mut() = None;
    let s = call(&mut t, &env, "search", json!({"question": "how long is a tape archive kept"})).unwrap();
    assert_eq!(s.extra["route"]["routed_by"], "embeddings", "{}", s.extra);
    assert!(!s.text.contains("Routed by:"), "{}", s.text);
}

#[test]
fn chapters_are_resources_hits_name_them_and_ids_complete() {
    let env = Fake::default();
    env.put("/docs/m.md", &manual());
    let mut t = open(&env);
    let listed = t.resources();
    let uris: Vec<&str> = listed.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(
        uris,
        [
            "quarry://self/chapter/1",
            "quarry://self/chapter/1.1",
            "quarry://self/chapter/1.2",
            "quarry://self/chapter/2",
            "quarry://self/chapter/2.1",
            "quarry://self/chapter/2.2"
        ]
    );
    assert_eq!(listed[4].name, "2.1 Bandwidth limits");
    let read = t.read("quarry://self/chapter/2.1").unwrap();
    match &read[0].body {
        Body::Text(text) => assert!(text.starts_with("## Bandwidth limits") && text.contains("--bwlimit"), "{text}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(t.read("quarry://self/chapter/7"), Err(ToolError::NotFound(_))));
    assert!(matches!(t.read("quarry://self/other/1"), Err(ToolError::NotFound(_))));
    let done = t.complete(&Target::Template(chapter_rag::catalog::CHAPTER_TEMPLATE.into()), "id", "2");
    assert_eq!(done.values, ["2", "2.1", "2.2"]);
    assert_eq!(t.complete(&Target::Tool("get_chapter".into()), "chapter_id", "1.").values, ["1.1", "1.2"]);
    assert!(t.complete(&Target::Prompt("answer".into()), "question", "").values.is_empty());
    let found = call(&mut t, &env, "search", json!({"question": "bwlimit bandwidth timetable"})).unwrap();
    assert!(!found.hits.is_empty());
    for h in &found.hits {
        assert_eq!(h.resource, Some(format!("quarry://self/chapter/{}", chapter(h))));
    }
    assert!(found.content.is_empty(), "a search stays one text block");
    let prompt = t.prompt(&env, "answer", &json!({"question": "How do I cap the bandwidth?"}).to_string()).unwrap();
    match &prompt.messages[0].content {
        Block::Text(text) => assert!(
            text.contains("[chapter 3.4]") && text.contains("Search report:") && text.contains("cap the bandwidth")
        ),
        other => panic!("{other:?}"),
    }
    assert!(
        prompt.messages[1..]
            .iter()
            .all(|m| matches!(&m.content, Block::Link(l) if l.uri.starts_with("quarry://self/chapter/")))
    );
    assert!(prompt.messages.len() > 1);
    assert!(matches!(t.prompt(&env, "answer", "{}"), Err(ToolError::InvalidArgs(_))));
    assert!(matches!(t.prompt(&env, "other", "{}"), Err(ToolError::NotFound(_))));
}

/// The chapter a hit lies in (its typed location's).
fn chapter(h: &chapter_rag::tool::Hit) -> &str {
    h.location.as_ref().and_then(|l| l.chapter.as_deref()).expect("a chapter-rag hit names its chapter")
}
