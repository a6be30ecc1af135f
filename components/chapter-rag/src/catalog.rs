//! What the chapter RAG offers beside its tools: every chapter as a resource
//! (`quarry://self/chapter/{id}`, listed by the host as `quarry://INSTANCE/chapter/{id}`), each
//! search hit's chapter named by its metadata's `resource`, the answerer's prompt (with links to
//! the chapters of its passages), and chapter ids completed.
//!
//! A search result stays one text block: clients that read only the first block (CrewAI), and
//! those that expect one, see what they did before; the links ride in the hits' metadata.

use serde_json::{Value, json};
use tool_guest::catalog::{
    Block, Body, Catalog, Completion, Contents, Link, Message, Prompt, PromptArg, PromptSpec, Resource, Target,
    Template,
};
use tool_guest::tool::{Hit, ToolError};

use crate::env::Env;
use crate::tool::ChapterTool;

/// The template of a chapter's URI, as the component names it.
pub const CHAPTER_TEMPLATE: &str = "quarry://self/chapter/{id}";
/// The media type of a chapter: Markdown, as the manual is.
const MARKDOWN: &str = "text/markdown";
/// The most characters a chapter resource returns; a longer one says which sections to read.
pub const MAX_RESOURCE_CHARS: usize = 200_000;
/// The most completion values returned.
const MAX_COMPLETIONS: usize = 100;
/// The prompt's name.
pub const ANSWER_PROMPT: &str = "answer";

pub use crate::tree::chapter_uri;

/// The file name of the manual, for descriptions.
fn manual_name(manual: &str) -> &str {
    manual.rsplit('/').next().unwrap_or(manual)
}

/// The catalog of an instance serving `manual` (known at open, before the index is built).
pub fn catalog(manual: &str) -> Catalog {
    let name = manual_name(manual);
    Catalog {
        lists_resources: true,
        templates: vec![Template {
            uri_template: CHAPTER_TEMPLATE.into(),
            name: "chapter".into(),
            description: Some(format!(
                "A chapter of {name} with its sections, by id (1, 3.2, ...; list_chapter_tree shows them)"
            )),
            mime_type: Some(MARKDOWN.into()),
        }],
        prompts: vec![PromptSpec {
            name: ANSWER_PROMPT.into(),
            description: format!(
                "Answer a question from {name}: the answerer's instructions (cite chapter ids, say when the manual does not answer) with the routed search's passages"
            ),
            arguments: vec![PromptArg {
                name: "question".into(),
                description: Some("The user's question".into()),
                required: true,
            }],
        }],
    }
}

/// The answerer's instructions (the write-up's answer agent).
const INSTRUCTIONS: &str = "Answer the user's question from the search report below, which holds the passages of the \
manual that the question was routed to.\n\
1. First the answer's core in under 100 words.\n\
2. Then the details point by point, each ending with its source, written as [chapter 3.4] (the chapter ids \
of the report).\n\
3. If the passages do not hold the information, say so plainly; do not piece an answer together or invent \
one. Cite only chapters of the report.";

impl ChapterTool {
    /// Every chapter, in document order, as a resource.
    pub fn resources(&self) -> Vec<Resource> {
        let tree = &self.built_ref().tree;
        tree.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| Resource {
                uri: chapter_uri(&n.id),
                name: format!("{} {}", n.id, n.title),
                title: Some(n.title.clone()),
                description: Some(format!(
                    "{} (lines {}-{})",
                    tree.path(i).join(" > "),
                    n.lines.0,
                    n.subtree_last_line
                )),
                mime_type: Some(MARKDOWN.into()),
            })
            .collect()
    }

    /// The chapter at `uri`, with its sections.
    pub fn read(&self, uri: &str) -> Result<Vec<Contents>, ToolError> {
        let id = uri
            .strip_prefix("quarry://self/chapter/")
            .ok_or_else(|| ToolError::NotFound(format!("no resource at {uri}")))?;
        let built = self.built_ref();
        let i = built.tree.find(id).ok_or_else(|| ToolError::NotFound(format!("no chapter {id:?}")))?;
        let n = &built.tree.nodes[i];
        let body = &built.text[n.subtree.clone()];
        let text = if body.chars().count() > MAX_RESOURCE_CHARS {
            let sections: Vec<String> = n.children.iter().map(|&c| chapter_uri(&built.tree.nodes[c].id)).collect();
            format!(
                "{}\n\n[cut at {MAX_RESOURCE_CHARS} characters; read its sections: {}]",
                body.chars().take(MAX_RESOURCE_CHARS).collect::<String>().trim_end(),
                sections.join(", ")
            )
        } else {
            body.to_string()
        };
        Ok(vec![Contents { uri: uri.to_string(), mime_type: Some(MARKDOWN.into()), body: Body::Text(text) }])
    }

    /// Links to the chapters `hits` lie in, each once, in the order they first appear.
    pub fn links(&self, hits: &[Hit]) -> Vec<Block> {
        let tree = &self.built_ref().tree;
        let mut seen = std::collections::BTreeSet::new();
        hits.iter()
            .filter_map(|h| h.location.as_ref().and_then(|l| l.chapter.as_deref()))
            .filter(|id| seen.insert(id.to_string()))
            .filter_map(|id| tree.find(id).map(|i| (id, i)))
            .map(|(id, i)| {
                Block::Link(Link {
                    uri: chapter_uri(id),
                    name: format!("{id} {}", tree.nodes[i].title),
                    description: Some(tree.path(i).join(" > ")),
                    mime_type: Some(MARKDOWN.into()),
                })
            })
            .collect()
    }

    /// The answerer's prompt for `args.question`: its instructions and the routed search's
    /// report, then links to the chapters the passages lie in.
    pub fn prompt(&mut self, env: &dyn Env, name: &str, args: &str) -> Result<Prompt, ToolError> {
        if name != ANSWER_PROMPT {
            return Err(ToolError::NotFound(format!("no prompt {name:?}; the prompt is {ANSWER_PROMPT:?}")));
        }
        let args: Value = serde_json::from_str(args).unwrap_or(Value::Null);
        let question = args["question"].as_str().unwrap_or_default();
        if question.trim().is_empty() {
            return Err(ToolError::InvalidArgs("the answer prompt needs its `question` argument".into()));
        }
        let report = self.call(env, "search", &json!({ "question": question }).to_string())?;
        let text = format!("{INSTRUCTIONS}\n\nUser question: {question}\n\nSearch report:\n{}", report.text);
        let mut messages = vec![Message { assistant: false, content: Block::Text(text) }];
        messages.extend(self.links(&report.hits).into_iter().map(|content| Message { assistant: false, content }));
        Ok(Prompt { description: None, messages })
    }

    /// Chapter ids for an argument that takes one: the template's `id`, and the tools'
    /// `chapter_id`, `chapter_ids`, `under` and `cited`.
    pub fn complete(&self, target: &Target, argument: &str, value: &str) -> Completion {
        let takes_ids = match target {
            Target::Template(t) => t == CHAPTER_TEMPLATE && argument == "id",
            Target::Tool(_) => matches!(argument, "chapter_id" | "chapter_ids" | "under" | "cited" | "candidates"),
            Target::Prompt(_) => false,
        };
        if !takes_ids {
            return Completion::default();
        }
        let ids = self.built_ref().tree.nodes.iter().map(|n| n.id.as_str());
        Completion::starting_with(ids, value, MAX_COMPLETIONS)
    }
}
