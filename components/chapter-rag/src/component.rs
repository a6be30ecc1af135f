//! The component: WIT glue around [`crate::tool`]. The manual comes through the preopens the
//! host granted, vectors through the host-linked embedder, progress through the host's bar.

wit_bindgen::generate!({
    path: "../../wit",
    world: "chapter-rag",
    // Quarry's own interfaces are bound once, in tool-guest, for every tool component.
    with: {
        "quarry:retrieval/types@0.6.0": tool_guest::types,
        "quarry:retrieval/embedder@0.6.0": tool_guest::embedder,
        "quarry:retrieval/progress@0.6.0": tool_guest::progress,
        "quarry:retrieval/corpus@0.6.0": tool_guest::corpus,
        "quarry:retrieval/client@0.6.0": tool_guest::client,
    },
    generate_all,
});

use std::cell::RefCell;

use tool_guest::GuestEnv;
use tool_guest::catalog::{Catalog, Completion, Contents, Prompt, Resource, Target};
use tool_guest::tool::{Output, Spec, ToolError};

use crate::tool::{ChapterTool, Configured, Env};

const ENV: GuestEnv = GuestEnv { file_kind: "a Markdown file" };

impl Env for GuestEnv {
    fn stamp(&self, path: &str) -> Option<(u64, u128)> {
        let m = std::fs::metadata(path).ok()?;
        let modified = m.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos();
        Some((m.len(), modified))
    }
}

/// Configured at `open`, indexed at `prepare` (or at the first call, if a host did not prepare).
enum State {
    Configured(Configured),
    Ready(Box<ChapterTool>),
}

struct Chapters {
    specs: Vec<Spec>,
    /// The manual's path, for the catalog.
    manual: String,
    state: RefCell<State>,
}

impl Chapters {
    fn ready(&self) -> Result<std::cell::RefMut<'_, ChapterTool>, ToolError> {
        let mut state = self.state.borrow_mut();
        if let State::Configured(c) = &*state {
            // On a clone: a failed prepare leaves the config for the next try.
            *state = State::Ready(Box::new(c.clone().prepare(&ENV)?));
        }
        std::cell::RefMut::filter_map(state, |s| match s {
            State::Ready(t) => Some(&mut **t),
            State::Configured(_) => None,
        })
        .map_err(|_| ToolError::Internal("the manual was not indexed".into()))
    }
}

impl tool_guest::Tools for Chapters {
    fn open(config: &str) -> Result<Chapters, ToolError> {
        let configured = Configured::parse(config, &ENV)?;
        let specs = configured.specs();
        let manual = configured.manual().to_string();
        Ok(Chapters { specs, manual, state: RefCell::new(State::Configured(configured)) })
    }

    fn specs(&self) -> Vec<Spec> {
        self.specs.clone()
    }

    fn prepare(&self) -> Result<(), ToolError> {
        self.ready().map(drop)
    }

    fn call(&self, name: &str, args: &str) -> Result<Output, ToolError> {
        self.ready()?.call(&ENV, name, args)
    }

    fn catalog(&self) -> Catalog {
        crate::catalog::catalog(&self.manual)
    }

    fn resources(&self) -> Result<Vec<Resource>, ToolError> {
        Ok(self.ready()?.resources())
    }

    fn read(&self, uri: &str) -> Result<Vec<Contents>, ToolError> {
        self.ready()?.read(uri)
    }

    fn get_prompt(&self, name: &str, args: &str) -> Result<Prompt, ToolError> {
        self.ready()?.prompt(&ENV, name, args)
    }

    fn complete(&self, target: Target, argument: &str, value: &str, _context: &str) -> Result<Completion, ToolError> {
        Ok(self.ready()?.complete(&target, argument, value))
    }
}

tool_guest::export_tools!(Chapters);
