//! The component: WIT glue around [`crate::tool`]. The manual comes through the preopens the
//! host granted, vectors through the host-linked embedder, progress through the host's bar.

wit_bindgen::generate!({
    path: "../../wit",
    world: "chapter-rag",
    generate_all,
});

use std::cell::RefCell;

use exports::quarry::retrieval::tool::{Guest, GuestInstance, Instance};
use quarry::retrieval::embedder::{self, InputKind};
use quarry::retrieval::types::{Hit, ToolError, ToolOutput, ToolSpec};

use crate::tool::{self, ChapterTool, Env, Model};

struct Component;

/// The component's view of the world.
struct WasiEnv;

fn map_err(e: tool::ToolError) -> ToolError {
    match e {
        tool::ToolError::InvalidArgs(m) => ToolError::InvalidArgs(m),
        tool::ToolError::InvalidConfig(m) => ToolError::InvalidConfig(m),
        tool::ToolError::NotFound(m) => ToolError::NotFound(m),
        tool::ToolError::Upstream(m) => ToolError::Upstream(m),
        tool::ToolError::Denied(m) => ToolError::Denied(m),
        tool::ToolError::Internal(m) => ToolError::Internal(m),
    }
}

fn embed_err(e: embedder::EmbedError) -> tool::ToolError {
    let m = match e {
        embedder::EmbedError::InvalidInput(m) => format!("the embedder refused the input: {m}"),
        embedder::EmbedError::Unavailable(m) => format!("the embedder is unavailable: {m}"),
        embedder::EmbedError::Internal(m) => format!("the embedder failed: {m}"),
    };
    tool::ToolError::Upstream(m)
}

impl Env for WasiEnv {
    fn model(&self) -> Model {
        let i = embedder::info();
        Model { id: i.id, dimension: i.dimension as usize, max_tokens: i.max_tokens as usize }
    }

    fn embed(&self, texts: &[String], query: bool) -> Result<Vec<Vec<f32>>, tool::ToolError> {
        let kind = if query { InputKind::Query } else { InputKind::Document };
        let out = embedder::embed(texts, kind).map_err(embed_err)?;
        if out.len() != texts.len() {
            return Err(tool::ToolError::Upstream(format!(
                "the embedder returned {} vectors for {} texts",
                out.len(),
                texts.len()
            )));
        }
        Ok(out.into_iter().map(|e| e.vector).collect())
    }

    fn count_tokens(&self, texts: &[String]) -> Result<Vec<u32>, tool::ToolError> {
        embedder::count_tokens(texts).map_err(embed_err)
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
        quarry::retrieval::progress::report(task, done, total, unit);
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
