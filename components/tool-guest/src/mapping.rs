//! The SDK's types to and from the WIT bindings, and the imports as a [`BaseEnv`].

use crate::catalog::{Block, Body, Catalog, Completion, Contents, Prompt, Resource, Target};
use crate::tool::{BaseEnv, Model, Output, TokenSpan, ToolError};

use crate::embedder::{self, EmbedError, InputKind};
use crate::types;

/// A tool's error as WIT's `tool-error`.
pub fn to_wit(e: ToolError) -> types::ToolError {
    match e {
        ToolError::InvalidArgs(m) => types::ToolError::InvalidArgs(m),
        ToolError::InvalidConfig(m) => types::ToolError::InvalidConfig(m),
        ToolError::NotFound(m) => types::ToolError::NotFound(m),
        ToolError::Upstream(m) => types::ToolError::Upstream(m),
        ToolError::Denied(m) => types::ToolError::Denied(m),
        ToolError::Internal(m) => types::ToolError::Internal(m),
    }
}

/// A call's result as WIT's `tool-output`.
pub fn output(out: Output) -> types::ToolOutput {
    types::ToolOutput {
        text: out.text,
        hits: out
            .hits
            .into_iter()
            .map(|h| types::Hit {
                content: h.content,
                score: h.score,
                source: h.source,
                location: h.location.map(|l| types::Location {
                    path: l.path,
                    lines: l.lines.map(|(first, last)| types::LineRange { first, last }),
                    chapter: l.chapter,
                }),
                resource: h.resource,
                metadata: h.metadata.to_string(),
            })
            .collect(),
        route: out.route.map(|r| types::Route {
            chapters: r
                .chapters
                .into_iter()
                .map(|c| types::RoutedChapter { chapter: c.chapter, path: c.path, confidence: c.confidence })
                .collect(),
            ranking: r.ranking,
        }),
        extra: Some(out.extra.to_string()),
        content: out.content.into_iter().map(block_to_wit).collect(),
    }
}

/// A block as WIT's `content-block`.
pub fn block_to_wit(b: Block) -> types::ContentBlock {
    match b {
        Block::Text(t) => types::ContentBlock::Text(t),
        Block::Image(data, mime_type) => types::ContentBlock::Image(types::Media { data, mime_type }),
        Block::Audio(data, mime_type) => types::ContentBlock::Audio(types::Media { data, mime_type }),
        Block::Link(l) => types::ContentBlock::Link(types::ResourceLink {
            uri: l.uri,
            name: l.name,
            description: l.description,
            mime_type: l.mime_type,
        }),
        Block::Embedded(c) => types::ContentBlock::Embedded(contents_to_wit(c)),
    }
}

/// Contents as WIT's `contents`.
pub fn contents_to_wit(c: Contents) -> types::Contents {
    let body = match c.body {
        Body::Text(t) => types::Body::Text(t),
        Body::Blob(b) => types::Body::Blob(b),
    };
    types::Contents { uri: c.uri, mime_type: c.mime_type, body }
}

/// A listed resource as WIT's `resource-info`.
pub fn resource_to_wit(r: Resource) -> types::ResourceInfo {
    types::ResourceInfo { uri: r.uri, name: r.name, title: r.title, description: r.description, mime_type: r.mime_type }
}

/// A catalog as WIT's.
pub fn catalog_to_wit(c: Catalog) -> types::Catalog {
    types::Catalog {
        lists_resources: c.lists_resources,
        templates: c
            .templates
            .into_iter()
            .map(|t| types::ResourceTemplate {
                uri_template: t.uri_template,
                name: t.name,
                description: t.description,
                mime_type: t.mime_type,
            })
            .collect(),
        prompts: c
            .prompts
            .into_iter()
            .map(|p| types::PromptSpec {
                name: p.name,
                description: p.description,
                arguments: p
                    .arguments
                    .into_iter()
                    .map(|a| types::PromptArgument { name: a.name, description: a.description, required: a.required })
                    .collect(),
            })
            .collect(),
    }
}

/// A prompt as WIT's.
pub fn prompt_to_wit(p: Prompt) -> types::Prompt {
    types::Prompt {
        description: p.description,
        messages: p
            .messages
            .into_iter()
            .map(|m| types::PromptMessage {
                role: if m.assistant { types::Role::Assistant } else { types::Role::User },
                content: block_to_wit(m.content),
            })
            .collect(),
    }
}

/// A completion as WIT's.
pub fn completion_to_wit(c: Completion) -> types::Completion {
    types::Completion { values: c.values, total: c.total, has_more: c.has_more }
}

/// WIT's completion target as the SDK's.
pub fn target_from_wit(t: types::CompletionTarget) -> Target {
    match t {
        types::CompletionTarget::Prompt(p) => Target::Prompt(p),
        types::CompletionTarget::ResourceTemplate(t) => Target::Template(t),
        types::CompletionTarget::Tool(t) => Target::Tool(t),
    }
}

/// Specs as WIT's `tool-spec`s.
pub fn specs(list: impl IntoIterator<Item = crate::tool::Spec>) -> Vec<types::ToolSpec> {
    list.into_iter()
        .map(|s| types::ToolSpec { args_schema: s.schema_text(), name: s.name, description: s.description })
        .collect()
}

fn embed_err(e: EmbedError) -> ToolError {
    ToolError::Upstream(match e {
        EmbedError::InvalidInput(m) => format!("the embedder refused the input: {m}"),
        EmbedError::Unavailable(m) => format!("the embedder is unavailable: {m}"),
        EmbedError::Internal(m) => format!("the embedder failed: {m}"),
    })
}

/// The WIT imports as the SDK's [`BaseEnv`]: the host-linked embedder, the preopens, stderr
/// (the host's log) and the host's progress bar. A component implements its own `Env` on top.
pub struct GuestEnv {
    /// What files this component reads, for messages ("a DOCX file").
    pub file_kind: &'static str,
}

impl BaseEnv for GuestEnv {
    fn model(&self) -> Model {
        let i = embedder::info();
        Model { id: i.id, dimension: i.dimension as usize, max_tokens: i.max_tokens as usize }
    }

    fn embed(&self, texts: &[String], query: bool) -> Result<Vec<Vec<f32>>, ToolError> {
        let kind = if query { InputKind::Query } else { InputKind::Document };
        let out = embedder::embed(texts, kind).map_err(embed_err)?;
        if out.len() != texts.len() {
            return Err(ToolError::Upstream(format!(
                "the embedder returned {} vectors for {} texts",
                out.len(),
                texts.len()
            )));
        }
        Ok(out.into_iter().map(|e| e.vector).collect())
    }

    fn count_tokens(&self, texts: &[String]) -> Result<Vec<u32>, ToolError> {
        embedder::count_tokens(texts).map_err(embed_err)
    }

    fn token_spans(&self, texts: &[String]) -> Result<Vec<Vec<TokenSpan>>, ToolError> {
        let out = embedder::token_spans(texts).map_err(embed_err)?;
        Ok(out.into_iter().map(|t| t.into_iter().map(|s| (s.start, s.end)).collect()).collect())
    }

    fn read_file(&self, path: &str, max_bytes: u64) -> Result<Vec<u8>, ToolError> {
        crate::tool::read_file(path, max_bytes, self.file_kind)
    }

    fn log(&self, line: &str) {
        eprintln!("{line}");
    }

    fn progress(&self, task: &str, done: u64, total: u64, unit: &str) {
        crate::progress::report(task, done, total, unit);
    }

    fn open_corpus(
        &self,
        name: &str,
        shape: rag_core::corpus::Shape,
    ) -> Result<std::rc::Rc<dyn rag_core::corpus::Corpus>, ToolError> {
        let c = crate::host_corpus::open(name, shape).map_err(crate::tool::corpus_error)?;
        Ok(std::rc::Rc::new(c))
    }

    fn ask(
        &self,
        key: &str,
        kind: crate::tool::Ask,
        params: &serde_json::Value,
    ) -> Result<serde_json::Value, crate::tool::AskError> {
        use crate::client::{AskError as E, RequestKind};
        use crate::tool::{Ask, AskError};
        let kind = match kind {
            Ask::Sampling => RequestKind::Sampling,
            Ask::Elicitation => RequestKind::Elicitation,
            Ask::Roots => RequestKind::Roots,
        };
        let answer = crate::client::ask(key, kind, &params.to_string()).map_err(|e| match e {
            E::Unsupported(m) => AskError::Unsupported(m),
            E::Pending => AskError::Pending,
            E::Failed(m) => AskError::Failed(m),
        })?;
        serde_json::from_str(&answer).map_err(|e| AskError::Failed(format!("the client's answer is not JSON: {e}")))
    }
}
