//! What a tool offers beside its calls, as plain Rust (WIT's content blocks, resources,
//! prompts and completions): a tool's logic builds these and is tested natively; `tool-guest`
//! maps them onto the bindings once.

/// One block of a result or a prompt message.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// Text.
    Text(String),
    /// An image: its bytes and media type.
    Image(Vec<u8>, String),
    /// A sound: its bytes and media type.
    Audio(Vec<u8>, String),
    /// A link to a resource the client may read.
    Link(Link),
    /// A resource's contents, embedded.
    Embedded(Contents),
}

/// A link to a resource.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// Its URI.
    pub uri: String,
    /// A short name.
    pub name: String,
    /// What it is.
    pub description: Option<String>,
    /// Its media type.
    pub mime_type: Option<String>,
}

/// What a resource holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// Text.
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
}

/// A resource's contents.
#[derive(Debug, Clone, PartialEq)]
pub struct Contents {
    /// Its URI.
    pub uri: String,
    /// Its media type.
    pub mime_type: Option<String>,
    /// What it holds.
    pub body: Body,
}

/// A resource as listed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Resource {
    /// Its URI.
    pub uri: String,
    /// A short name.
    pub name: String,
    /// A title for people.
    pub title: Option<String>,
    /// What it holds.
    pub description: Option<String>,
    /// Its media type.
    pub mime_type: Option<String>,
}

/// A resource template (level-1 RFC 6570: `{name}` is one path segment).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Template {
    /// The template.
    pub uri_template: String,
    /// A short name.
    pub name: String,
    /// What its resources hold.
    pub description: Option<String>,
    /// Their media type.
    pub mime_type: Option<String>,
}

/// One argument of a prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptArg {
    /// Its name.
    pub name: String,
    /// What it is.
    pub description: Option<String>,
    /// Whether the prompt needs it.
    pub required: bool,
}

/// A prompt as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptSpec {
    /// Its name (`[a-z0-9_]+`).
    pub name: String,
    /// What it is for.
    pub description: String,
    /// Its arguments.
    pub arguments: Vec<PromptArg>,
}

/// One message of a prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Said by the assistant (else by the user).
    pub assistant: bool,
    /// What.
    pub content: Block,
}

/// A prompt, filled in.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Prompt {
    /// What it is for, when it says more than the spec.
    pub description: Option<String>,
    /// Its messages.
    pub messages: Vec<Message>,
}

/// What a completion completes an argument of.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// A prompt's.
    Prompt(String),
    /// A resource template's (by its URI template).
    Template(String),
    /// A tool's.
    Tool(String),
}

/// Values an argument may take, best first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Completion {
    /// The values (the host sends at most 100).
    pub values: Vec<String>,
    /// How many there are in all, when known.
    pub total: Option<u32>,
    /// Whether there are more than `values`.
    pub has_more: bool,
}

impl Completion {
    /// The first `max` of `all` that start with `prefix` (case-insensitively), and how many did.
    pub fn starting_with<'a>(all: impl IntoIterator<Item = &'a str>, prefix: &str, max: usize) -> Completion {
        let prefix = prefix.to_lowercase();
        let matching: Vec<&str> = all.into_iter().filter(|v| v.to_lowercase().starts_with(&prefix)).collect();
        let total = matching.len();
        Completion {
            values: matching.into_iter().take(max).map(str::to_string).collect(),
            total: u32::try_from(total).ok(),
            has_more: total > max,
        }
    }
}

/// What an instance offers beside its tools: known at `open`, stable.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Catalog {
    /// Whether it lists resources.
    pub lists_resources: bool,
    /// Its resource templates.
    pub templates: Vec<Template>,
    /// Its prompts.
    pub prompts: Vec<PromptSpec>,
}
