//! `quarry init`: a working `quarry.toml` for the user's own documents, with the built-in
//! embedder and model, grants limited to the documents' folders (each index is kept in its
//! instance's own corpus, by the host), and comments that say what each line does.

use std::path::{Path, PathBuf};

use super::{EXIT_OK, EXIT_USAGE, Outcome, fail};
use crate::config::Config;

/// `quarry init`'s flags.
#[derive(clap::Args, Debug)]
pub struct Flags {
    /// A manual (Markdown, text or DOCX) for chapter RAG; repeatable.
    #[arg(long, value_name = "PATH")]
    pub manual: Vec<PathBuf>,
    /// A DOCX file for semantic search; repeatable.
    #[arg(long, value_name = "PATH")]
    pub docx: Vec<PathBuf>,
    /// The config file to write (default: --config, else ./quarry.toml).
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Replace the file if it exists.
    #[arg(long)]
    pub force: bool,
}

/// `quarry init`: writes the config (to `--output`, else `config`, the config path the other
/// subcommands read), then says what to run next.
pub fn run(flags: Flags, config: PathBuf) -> Outcome {
    let args = InitArgs {
        manuals: flags.manual,
        docx: flags.docx,
        output: flags.output.unwrap_or(config),
        force: flags.force,
        model: ModelChoice::here(),
    };
    let written = init(&args).map_err(|e| fail(EXIT_USAGE, e))?;
    let config = args.output.display();
    println!("wrote {config}:");
    for (name, document, _) in &written {
        println!("  tool instance {name:?} over {}", document.display());
    }
    println!("  {}", args.model.said);
    let (first, _, example) = &written[0];
    println!("next:");
    println!("  quarry -c {config} list");
    println!("  quarry -c {config} call {first}{example}   (the first call builds the index)");
    println!("  quarry -c {config} serve --stdio   (what an MCP client such as CrewAI's MCPServerAdapter starts)");
    Ok(EXIT_OK)
}

/// What `quarry init` is asked for.
pub struct InitArgs {
    /// Manuals for chapter-rag (Markdown, text or DOCX).
    pub manuals: Vec<PathBuf>,
    /// DOCX files for docx-search.
    pub docx: Vec<PathBuf>,
    /// The file to write.
    pub output: PathBuf,
    /// Overwrite `output` if it exists.
    pub force: bool,
    /// The model to write.
    pub model: ModelChoice,
}

/// Why no config was written.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// Nothing to configure.
    #[error("nothing to set up: give a manual (`--manual MANUAL.md`) or a DOCX file (`--docx handbook.docx`)")]
    Nothing,
    /// A document is missing or of a kind its tool does not read.
    #[error("{path}: {why}")]
    Document {
        /// The path as given.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// The output exists and `--force` was not given.
    #[error("{0} already exists; pass --force to replace it, or --output to write elsewhere")]
    Exists(String),
    /// The config written would not load here (a built-in component or the model is missing).
    #[error("the config for these documents would not load: {0}")]
    WouldNotLoad(String),
    /// Writing failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// What was being written.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// One tool instance to write.
struct Instance {
    name: String,
    component: &'static str,
    /// The document, absolute.
    document: PathBuf,
    /// The config key the component reads the document's guest path from.
    key: &'static str,
    guest_dir: &'static str,
}

/// Writes the config; returns each instance's name, its document and an example call (what
/// follows `quarry call NAME`), for the summary.
pub fn init(args: &InitArgs) -> Result<Vec<(String, PathBuf, &'static str)>, InitError> {
    if args.manuals.is_empty() && args.docx.is_empty() {
        return Err(InitError::Nothing);
    }
    if args.output.exists() && !args.force {
        return Err(InitError::Exists(args.output.display().to_string()));
    }
    let mut instances: Vec<Instance> = Vec::new();
    let kinds = args
        .manuals
        .iter()
        .map(|p| (p, "builtin:chapter-rag", "manual", "/manual", &[".md", ".markdown", ".txt", ".docx"][..]))
        .chain(args.docx.iter().map(|p| (p, "builtin:docx-search", "docx", "/docs", &[".docx"][..])));
    for (path, component, key, guest_dir, extensions) in kinds {
        let document = std::path::absolute(path)
            .and_then(|p| p.canonicalize())
            .map_err(|e| InitError::Document { path: path.display().to_string(), why: format!("{e}") })?;
        if !document.is_file() {
            return Err(InitError::Document { path: path.display().to_string(), why: "not a file".into() });
        }
        let lower = document.to_string_lossy().to_ascii_lowercase();
        if !extensions.iter().any(|e| lower.ends_with(e)) {
            return Err(InitError::Document {
                path: path.display().to_string(),
                why: format!("{} reads {} files", component.trim_start_matches("builtin:"), extensions.join(", ")),
            });
        }
        let name = unique(&instances, &name_for(&document));
        instances.push(Instance { name, component, document, key, guest_dir });
    }
    let text = render(&instances, &args.model);
    // Checked as the host will read it before anything is written: a missing built-in
    // component or model is said now, and no file is left half right.
    let output = std::path::absolute(&args.output).unwrap_or_else(|_| args.output.clone());
    if let Err(e) = Config::parse(&output, &text) {
        return Err(InitError::WouldNotLoad(e.to_string()));
    }
    std::fs::write(&output, text).map_err(|source| InitError::Io { path: output.display().to_string(), source })?;
    Ok(instances.into_iter().map(|i| (i.name, i.document, example_call(i.component))).collect())
}

/// What follows `quarry call NAME` in an example call of `component`'s main tool.
fn example_call(component: &str) -> &'static str {
    if component.ends_with("chapter-rag") {
        r#".search '{"question": "..."}'"#
    } else {
        r#" '{"search_query": "..."}'"#
    }
}

/// An instance name from a file name: lowercase letters, digits and `-`, at most 40.
fn name_for(document: &Path) -> String {
    let stem = document.file_stem().map(|s| s.to_string_lossy().to_lowercase()).unwrap_or_default();
    let mut name = String::new();
    for c in stem.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            name.push(c);
        } else if !name.ends_with('-') && !name.is_empty() {
            name.push('-');
        }
    }
    let name: String = name.trim_end_matches('-').chars().take(40).collect();
    let name = name.trim_end_matches('-').to_string();
    if name.is_empty() { "docs".to_string() } else { name }
}

fn unique(taken: &[Instance], name: &str) -> String {
    let free = |n: &str| taken.iter().all(|i| i.name != n);
    if free(name) {
        return name.to_string();
    }
    (2..).map(|k| format!("{name}-{k}")).find(|n| free(n)).expect("a free name")
}

/// A TOML string.
fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// The model section `quarry init` writes: MiniLM with int8 matrix products on onnxruntime, as
/// the guide recommends (docs/src/benchmarks.md), where both are installed; else the fp32 graph on tract, which every
/// install has, saying why.
pub struct ModelChoice {
    /// The `[models.minilm]` section, with its comment.
    pub section: String,
    /// One line for the summary: which model, and why.
    pub said: String,
}

impl ModelChoice {
    /// What is installed here decides.
    pub fn here() -> ModelChoice {
        let q8 = crate::support::builtin::resolve(crate::support::builtin::Kind::Model, "all-minilm-l6-v2-q8");
        #[cfg(feature = "nn")]
        let runtime = quarry_nn::ort_library::locate(None);
        #[cfg(not(feature = "nn"))]
        let runtime: Result<std::path::PathBuf, String> = Err("this quarry is built without wasi-nn".into());
        match (q8, runtime) {
            (Ok(_), Ok(_)) => ModelChoice {
                section: "# The embedding model: all-MiniLM-L6-v2 (384 dimensions) with int8 matrix products, run by
# onnxruntime: about half the CPU of the fp32 graph on tract, within two questions of 40 of
# it on Quarry's benchmark (docs/src/benchmarks.md). The host loads it once and runs it natively. For the fp32
# graph on tract, the backend built into quarry: dir = \"builtin:all-minilm-l6-v2\", no backend.
[models.minilm]
dir = \"builtin:all-minilm-l6-v2-q8\"
backend = \"onnxruntime\"
"
                .into(),
                said: "model: all-MiniLM-L6-v2 q8 on onnxruntime (installed here; the recommended model)".into(),
            },
            (q8, runtime) => {
                let why = [
                    q8.err().map(|_| "no all-minilm-l6-v2-q8 model".to_string()),
                    runtime.err().map(|_| "no onnxruntime library".to_string()),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" and ");
                ModelChoice {
                    section: format!(
                        "# The embedding model: all-MiniLM-L6-v2 (384 dimensions), fp32, on tract (built into quarry).
# The recommended model is the q8 graph on onnxruntime (about half the CPU); this machine has
# {why} (`make models` from source installs both). The host loads the model once and runs
# it natively; `builtin:` finds it beside quarry or in ~/.cache/quarry/models.
[models.minilm]
dir = \"builtin:all-minilm-l6-v2\"
"
                    ),
                    said: format!(
                        "model: all-MiniLM-L6-v2 fp32 on tract ({why} here for the recommended q8 graph on onnxruntime; `make models` installs both)"
                    ),
                }
            }
        }
    }
}

fn render(instances: &[Instance], model: &ModelChoice) -> String {
    let first = &instances[0].name;
    let model = &model.section;
    let mut out = format!(
        r#"# Written by `quarry init`, quarry {version}.
# Paths are absolute; every key is in the guide (docs/src/configuration.md).
#
# Serve these tools to an agent (what CrewAI's MCPServerAdapter starts):
#   quarry -c quarry.toml serve --stdio
# Try one from a shell:
#   quarry -c quarry.toml list
#   quarry -c quarry.toml call {first}{example}
#
# A tool sees only what its grants below name; everything else is denied.

{model}
# The embedder: a sandboxed component that tokenises and pools text; the model's graph runs in
# the host. It sees the model's folder alone, read-only at /models/minilm.
[embedders.minilm]
component = "builtin:embedder-onnx"
config = {{ model = "minilm" }}
[embedders.minilm.grants]
models = ["minilm"]
memory = "1GiB"      # the model's tensors and a batch of texts
deadline = "600s"    # one batch of embeddings
"#,
        version = super::VERSION,
        example = example_call(instances[0].component),
    );
    for i in instances {
        let file = i.document.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        let folder = i.document.parent().unwrap_or(Path::new("/"));
        let (what, deadline) = if i.component.ends_with("chapter-rag") {
            (
                format!(
                    "# Chapter RAG over {file}: routes a question to its chapters, searches inside them and\n# cites chapter ids. Tools: {n}.search, {n}.route, {n}.list_chapter_tree,\n# {n}.get_chapter, {n}.search_chapter_content, {n}.validate_citations.",
                    n = i.name
                ),
                "\"1800s\"   # a call waits for the first index build (minutes for a long manual)",
            )
        } else {
            (
                format!("# Semantic search in {file} (CrewAI's DOCXSearchTool): one tool, {}.", i.name),
                "\"600s\"    # a call waits for the document's first ingest",
            )
        };
        out.push_str(&format!(
            r#"
{what}
[tools.{name}]
component = "{component}"
embedder = "minilm"
# The index: the instance's own corpus, which the host keeps in its cache. The first start
# embeds the document, later ones reopen the index in seconds, and an edit re-embeds what
# changed.
config = {{ {key} = {guest_file}, corpus = "self" }}
[tools.{name}.grants]
# The document's folder, read-only at {guest_dir}: the tool reads nothing else, writes nothing.
dirs = [{{ host = {folder}, guest = "{guest_dir}" }}]
memory = "1GiB"
deadline = {deadline}
"#,
            name = i.name,
            component = i.component,
            key = i.key,
            guest_file = quoted(&format!("{}/{file}", i.guest_dir)),
            guest_dir = i.guest_dir,
            folder = quoted(&folder.to_string_lossy()),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_file_name() {
        assert_eq!(name_for(Path::new("/x/MANUAL.md")), "manual");
        assert_eq!(name_for(Path::new("/x/Rclone User Guide (v1.2).docx")), "rclone-user-guide-v1-2");
        assert_eq!(name_for(Path::new("/x/手册.md")), "docs");
    }

    #[test]
    fn bad_input_is_refused_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("quarry.toml");
        let args = |manuals: Vec<PathBuf>, docx: Vec<PathBuf>| InitArgs {
            manuals,
            docx,
            output: output.clone(),
            force: false,
            model: ModelChoice::here(),
        };
        assert!(matches!(init(&args(vec![], vec![])), Err(InitError::Nothing)));
        let e = init(&args(vec![dir.path().join("missing.md")], vec![])).unwrap_err().to_string();
        assert!(e.contains("missing.md") && e.contains("No such file"), "{e}");
        std::fs::write(dir.path().join("notes.pdf"), "x").unwrap();
        let e = init(&args(vec![], vec![dir.path().join("notes.pdf")])).unwrap_err().to_string();
        assert!(e.contains("docx-search reads .docx files"), "{e}");
        assert!(!output.exists());
        std::fs::write(&output, "# mine").unwrap();
        std::fs::write(dir.path().join("m.md"), "# A\n").unwrap();
        let e = init(&args(vec![dir.path().join("m.md")], vec![])).unwrap_err().to_string();
        assert!(e.contains("already exists") && e.contains("--force"), "{e}");
        assert_eq!(std::fs::read_to_string(&output).unwrap(), "# mine");
    }
}
