//! The component: WIT glue around [`crate::tool`]. The manual comes through the preopens the
//! host granted, vectors through the host-linked embedder, progress through the host's bar.

wit_bindgen::generate!({
    path: "../../wit",
    world: "chapter-rag",
    // Quarry's own interfaces are bound once, in tool-guest, for every tool component.
    with: {
        "quarry:retrieval/types@0.2.0": tool_guest::types,
        "quarry:retrieval/embedder@0.2.0": tool_guest::embedder,
        "quarry:retrieval/progress@0.2.0": tool_guest::progress,
    },
    generate_all,
});

use std::cell::RefCell;

use exports::quarry::retrieval::tool::{Guest, GuestInstance, Instance};
use tool_guest::types::{ToolError, ToolOutput, ToolSpec};
use tool_guest::{GuestEnv, output, specs, to_wit};

use crate::tool::{ChapterTool, Env};

struct Component;

const ENV: GuestEnv = GuestEnv { file_kind: "a Markdown file" };

impl Env for GuestEnv {
    fn stamp(&self, path: &str) -> Option<(u64, u128)> {
        let m = std::fs::metadata(path).ok()?;
        let modified = m.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos();
        Some((m.len(), modified))
    }
}

struct Chapters(RefCell<ChapterTool>);

impl Guest for Component {
    type Instance = Chapters;
}

impl GuestInstance for Chapters {
    fn open(config: String) -> Result<Instance, ToolError> {
        let tool = ChapterTool::open(&config, &ENV).map_err(to_wit)?;
        Ok(Instance::new(Chapters(RefCell::new(tool))))
    }

    fn specs(&self) -> Vec<ToolSpec> {
        specs(self.0.borrow().specs())
    }

    fn call(&self, name: String, args: String) -> Result<ToolOutput, ToolError> {
        self.0.borrow_mut().call(&ENV, &name, &args).map(output).map_err(to_wit)
    }
}

export!(Component);
