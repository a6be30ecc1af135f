//! The component: WIT glue around [`crate::tool`]. The manual comes through the preopens the
//! host granted, vectors through the host-linked embedder, progress through the host's bar.

wit_bindgen::generate!({
    path: "../../wit",
    world: "chapter-rag",
    // Quarry's own interfaces are bound once, in tool-guest, for every RAG component.
    with: {
        "quarry:retrieval/types@0.1.0": tool_guest::types,
        "quarry:retrieval/embedder@0.1.0": tool_guest::embedder,
        "quarry:retrieval/progress@0.1.0": tool_guest::progress,
    },
    generate_all,
});

use std::cell::RefCell;

use exports::quarry::retrieval::tool::{Guest, GuestInstance, Instance};
use tool_guest::to_wit as map_err;
use tool_guest::types::{Hit, ToolError, ToolOutput, ToolSpec};

use crate::tool::{self, ChapterTool, Env, Model};

struct Component;

/// The component's view of the world.
struct WasiEnv;

impl Env for WasiEnv {
    fn model(&self) -> Model {
        tool_guest::model()
    }

    fn embed(&self, texts: &[String], query: bool) -> Result<Vec<Vec<f32>>, tool::ToolError> {
        tool_guest::embed(texts, query)
    }

    fn count_tokens(&self, texts: &[String]) -> Result<Vec<u32>, tool::ToolError> {
        tool_guest::count_tokens(texts)
    }

    fn stamp(&self, path: &str) -> Option<(u64, u128)> {
        let m = std::fs::metadata(path).ok()?;
        let modified = m.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos();
        Some((m.len(), modified))
    }

    fn read_file(&self, path: &str, max_bytes: u64) -> Result<Vec<u8>, tool::ToolError> {
        rag_core::tool::read_file(path, max_bytes, "a Markdown file")
    }

    fn log(&self, line: &str) {
        eprintln!("{line}");
    }

    fn progress(&self, task: &str, done: u64, total: u64, unit: &str) {
        tool_guest::progress(task, done, total, unit);
    }
}

struct Chapters(RefCell<ChapterTool>);

impl Guest for Component {
    type Instance = Chapters;
}

impl GuestInstance for Chapters {
    fn open(config: String) -> Result<Instance, ToolError> {
        let tool = ChapterTool::open(&config, &WasiEnv).map_err(map_err)?;
        Ok(Instance::new(Chapters(RefCell::new(tool))))
    }

    fn specs(&self) -> Vec<ToolSpec> {
        self.0
            .borrow()
            .specs()
            .into_iter()
            .map(|(name, description, args_schema)| ToolSpec { name, description, args_schema })
            .collect()
    }

    fn call(&self, name: String, args: String) -> Result<ToolOutput, ToolError> {
        let out = self.0.borrow_mut().call(&WasiEnv, &name, &args).map_err(map_err)?;
        Ok(ToolOutput {
            text: out.text,
            hits: out
                .hits
                .into_iter()
                .map(|h| Hit {
                    content: h.content,
                    score: Some(h.score),
                    source: Some(h.source),
                    metadata: h.metadata.to_string(),
                })
                .collect(),
            extra: Some(out.extra.to_string()),
        })
    }
}

export!(Component);
