//! A deliberately hostile tool: every tool here tries something the host must
//! contain (reading outside its preopen, writing a read-only dir, HTTP to
//! forbidden addresses, spinning forever, exhausting memory or stack, huge
//! output, panicking, hoarding host resources, flooding the network, steering
//! capability requests outside its grant, filling its disk, driving the
//! operator's terminal, feeding wasi-nn forged models and tensors). `echo` and `env` are the well-behaved controls.

wit_bindgen::generate!({
    path: "../../../wit",
    // Every Quarry capability a tool may import, so that the tests can attack each one; the
    // embedder is left out (importing it would make the host require one in every config).
    inline: "
        package quarry:hostile;
        world hostile {
            include quarry:retrieval/http-tool@0.6.0;
            import quarry:retrieval/couchbase@0.6.0;
            import quarry:retrieval/bedrock@0.6.0;
            import quarry:retrieval/progress@0.6.0;
            import quarry:retrieval/corpus@0.6.0;
            import wasi:nn/graph@0.2.0-rc-2024-10-28;
            import wasi:nn/inference@0.2.0-rc-2024-10-28;
            import wasi:nn/tensor@0.2.0-rc-2024-10-28;
            import wasi:nn/errors@0.2.0-rc-2024-10-28;
        }
    ",
    world: "quarry:hostile/hostile",
    generate_all,
});

use std::cell::RefCell;

use exports::quarry::retrieval::tool::{Guest, GuestInstance, Instance};
use quarry::retrieval::corpus;
use quarry::retrieval::couchbase::{self, CouchbaseError, IndexScope, VectorSearch};
use quarry::retrieval::types::{Hit, ToolError, ToolOutput, ToolSpec};
use serde_json::{Value, json};
use wasi::http::outgoing_handler;
use wasi::http::types::{ErrorCode, Fields, FutureIncomingResponse, OutgoingBody, OutgoingRequest, Scheme};
use wasi::io::streams::StreamError;

struct Component;

struct Hostile {
    label: String,
    /// Extra tools' worth of description, in KiB, to make the specs huge.
    spec_kib: usize,
    /// How long `prepare` takes, reporting progress every 100 ms.
    prepare_ms: u64,
    /// What `prepare` fails with, if anything.
    prepare_error: Option<String>,
    /// The resource templates its catalog declares, as given (`templates` in its config).
    templates: Vec<String>,
    /// The resources it lists, as given (`resources`); a read of any URI answers it.
    resources: Vec<String>,
}

thread_local! {
    /// Host resources kept across calls on purpose (the store lives on between calls).
    static HOARD: RefCell<Vec<Hoarded>> = const { RefCell::new(Vec::new()) };
    /// Calls that got to run, for the tests of queued and cancelled calls.
    static RAN: RefCell<u64> = const { RefCell::new(0) };
}

#[allow(dead_code, reason = "held only to keep the host resources alive")]
enum Hoarded {
    Fields(Fields),
    Body(OutgoingRequest, OutgoingBody, wasi::io::streams::OutputStream),
    Response(FutureIncomingResponse),
    Request(OutgoingRequest),
    Graph(wasi::nn::graph::Graph),
    Context(wasi::nn::graph::GraphExecutionContext),
    Tensor(wasi::nn::tensor::Tensor),
    Collection(corpus::Collection),
    Writer(corpus::Writer),
}

const TOOLS: &[(&str, &str, &str)] = &[
    (
        "echo",
        "Returns `text` unchanged.",
        r#"{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}"#,
    ),
    ("env", "Lists the environment variables the guest can see.", r#"{"type":"object","properties":{}}"#),
    ("read_file", "Reads a file.", r#"{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}"#),
    (
        "write_file",
        "Writes a file.",
        r#"{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path"]}"#,
    ),
    (
        "http_get",
        "GETs an http:// URL and returns the body.",
        r#"{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}"#,
    ),
    ("spin", "Loops forever.", r#"{"type":"object","properties":{}}"#),
    (
        "alloc",
        "Allocates and touches `mb` MiB.",
        r#"{"type":"object","properties":{"mb":{"type":"integer"}},"required":["mb"]}"#,
    ),
    ("recurse", "Recurses without bound on the wasm stack.", r#"{"type":"object","properties":{}}"#),
    (
        "recurse_shadow",
        "Recurses without bound on the linear-memory (shadow) stack.",
        r#"{"type":"object","properties":{}}"#,
    ),
    (
        "big_output",
        "Returns `mb` MiB of text.",
        r#"{"type":"object","properties":{"mb":{"type":"integer"}},"required":["mb"]}"#,
    ),
    ("panic", "Panics.", r#"{"type":"object","properties":{}}"#),
    (
        "hoard_fields",
        "Keeps `n` header sets of 60 KiB each across calls.",
        r#"{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}"#,
    ),
    (
        "hoard_bodies",
        "Keeps `n` unsent requests, each with a written 60 KiB body, across calls.",
        r#"{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}"#,
    ),
    (
        "try_many",
        "Tries `n` times to open `path` (or, with `create`, to create `path`N), counting refusals; never stops at one.",
        r#"{"type":"object","properties":{"path":{"type":"string"},"n":{"type":"integer"},"create":{"type":"boolean"}},"required":["path","n"]}"#,
    ),
    (
        "shout_and_panic",
        "Writes `kib` KiB to stderr: one long line, then a panic with a message as long.",
        r#"{"type":"object","properties":{"kib":{"type":"integer"}},"required":["kib"]}"#,
    ),
    (
        "hoard_requests",
        "Keeps `n` unsent requests across calls, each given a `len`-byte authority, method, scheme and path; counts the setters that succeeded.",
        r#"{"type":"object","properties":{"n":{"type":"integer"},"len":{"type":"integer"}},"required":["n","len"]}"#,
    ),
    (
        "deny_flood",
        "Sends `n` requests to refused hosts whose names are `len` bytes long.",
        r#"{"type":"object","properties":{"n":{"type":"integer"},"len":{"type":"integer"}},"required":["n","len"]}"#,
    ),
    (
        "http_flood",
        "Starts `n` GETs of `url` at once, keeps them, waits `wait_ms`, and counts them.",
        r#"{"type":"object","properties":{"url":{"type":"string"},"n":{"type":"integer"},"wait_ms":{"type":"integer"}},"required":["url","n"]}"#,
    ),
    (
        "many_hits",
        "Returns `n` empty hits.",
        r#"{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}"#,
    ),
    (
        "big_error",
        "Fails with a message of `mb` MiB.",
        r#"{"type":"object","properties":{"mb":{"type":"integer"}},"required":["mb"]}"#,
    ),
    (
        "fill",
        "Writes `mb` MiB into `path`, 1 MiB at a time, through std::fs.",
        r#"{"type":"object","properties":{"path":{"type":"string"},"mb":{"type":"integer"}},"required":["path","mb"]}"#,
    ),
    (
        "touch_many",
        "Creates `n` empty files in `dir`.",
        r#"{"type":"object","properties":{"dir":{"type":"string"},"n":{"type":"integer"}},"required":["dir","n"]}"#,
    ),
    (
        "cb_search",
        "A Couchbase vector search on index `index`, scoped to `bucket`.`scope` or cluster-level.",
        r#"{"type":"object","properties":{"bucket":{"type":"string"},"scope":{"type":"string"},"index":{"type":"string"},"limit":{"type":"integer"}},"required":["index"]}"#,
    ),
    (
        "cb_indexes",
        "Lists the Couchbase search indexes of `bucket`.`scope`.",
        r#"{"type":"object","properties":{"bucket":{"type":"string"},"scope":{"type":"string"}},"required":["bucket","scope"]}"#,
    ),
    (
        "bedrock",
        "Bedrock Retrieve on knowledge base `kb`, with `request` as the body (a small query by default).",
        r#"{"type":"object","properties":{"kb":{"type":"string"},"request":{"type":"string"}},"required":["kb"]}"#,
    ),
    (
        "report",
        "Reports progress on task `task`.",
        r#"{"type":"object","properties":{"task":{"type":"string"}},"required":["task"]}"#,
    ),
    (
        "sleep",
        "Waits `ms` milliseconds in a host call, then counts itself as run; with `mark`, first creates that file (in a granted directory): the event a test waits for to know the call runs.",
        r#"{"type":"object","properties":{"ms":{"type":"integer"},"mark":{"type":"string"}},"required":["ms"]}"#,
    ),
    ("ran", "How many `sleep` calls ran to their end.", r#"{"type":"object","properties":{}}"#),
    (
        "nn",
        "wasi-nn: `op` is load_bytes, load (model `name`), hoard_graphs / hoard_contexts / hoard_tensors (`n`, kept across calls; tensors of `mb` MiB), or compute (model `name`, `inputs`: [{name, dims, ty, len}]; `len` bytes of data, default what the dims need; `tokens` fills i64 inputs with token ids).",
        r#"{"type":"object","properties":{"op":{"type":"string"},"name":{"type":"string"},"n":{"type":"integer"},"mb":{"type":"integer"},"inputs":{"type":"array"}},"required":["op"]}"#,
    ),
    (
        "corpus_write",
        "For each corpus of `corpora`: opens it (3-dimensional, cosine), takes a writer, upserts `kib` KiB of chunks (1 MiB at most each), commits if `commit`, and with `keep` keeps the writer across calls. Returns each corpus's outcome.",
        r#"{"type":"object","properties":{"corpora":{"type":"array"},"kib":{"type":"integer"},"commit":{"type":"boolean"},"keep":{"type":"boolean"}},"required":["corpora"]}"#,
    ),
    (
        "corpus_kept",
        "Upserts a chunk with each writer `corpus_write` kept, and commits; returns what each said.",
        r#"{"type":"object","properties":{}}"#,
    ),
    (
        "work",
        "Computes for `n` million steps and returns a checksum (CPU only, no host calls).",
        r#"{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}"#,
    ),
];

impl Guest for Component {
    type Instance = Hostile;
}

fn bad_args(msg: impl Into<String>) -> ToolError {
    ToolError::InvalidArgs(msg.into())
}

fn text(s: String) -> ToolOutput {
    ToolOutput {
        text: s.clone(),
        hits: vec![Hit {
            content: s,
            score: None,
            source: None,
            location: None,
            resource: None,
            metadata: "{}".into(),
        }],
        route: None,
        extra: None,
        content: Vec::new(),
    }
}

impl GuestInstance for Hostile {
    fn open(config: String) -> Result<Instance, ToolError> {
        let cfg: Value =
            serde_json::from_str(&config).map_err(|e| ToolError::InvalidConfig(format!("config is not JSON: {e}")))?;
        let obj = cfg.as_object().ok_or_else(|| ToolError::InvalidConfig("config must be an object".into()))?;
        const KEYS: [&str; 8] =
            ["label", "reject_mb", "spec_kib", "prepare_ms", "prepare_error", "open_ms", "templates", "resources"];
        if let Some(k) = obj.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(ToolError::InvalidConfig(format!("unknown config key `{k}`; accepted: {}", KEYS.join(", "))));
        }
        if let Some(mb) = obj.get("reject_mb").and_then(Value::as_u64) {
            // A rejection the host would keep and repeat, if it kept it whole.
            return Err(ToolError::InvalidConfig("r".repeat(mb as usize * (1 << 20))));
        }
        // A slow open: what a huge manual's reading costs a real tool.
        if let Some(ms) = obj.get("open_ms").and_then(Value::as_u64) {
            wasi::clocks::monotonic_clock::subscribe_duration(ms * 1_000_000).block();
        }
        let label = obj.get("label").and_then(Value::as_str).unwrap_or("hostile").to_string();
        let spec_kib = obj.get("spec_kib").and_then(Value::as_u64).unwrap_or(0) as usize;
        let prepare_ms = obj.get("prepare_ms").and_then(Value::as_u64).unwrap_or(0);
        let prepare_error = obj.get("prepare_error").and_then(Value::as_str).map(str::to_owned);
        let strings = |k: &str| -> Vec<String> {
            obj.get(k)
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
                .unwrap_or_default()
        };
        let (templates, resources) = (strings("templates"), strings("resources"));
        Ok(Instance::new(Hostile { label, spec_kib, prepare_ms, prepare_error, templates, resources }))
    }

    /// A slow preparation (`prepare_ms`, in steps of 100 ms, each reported), or a failing one.
    fn prepare(&self) -> Result<(), ToolError> {
        let steps = self.prepare_ms.div_ceil(100);
        for i in 0..steps {
            quarry::retrieval::progress::report("preparing the fixture", i, steps, "steps");
            wasi::clocks::monotonic_clock::subscribe_duration(100_000_000).block();
        }
        if steps > 0 {
            quarry::retrieval::progress::report("preparing the fixture", steps, steps, "steps");
        }
        match &self.prepare_error {
            Some(m) => Err(ToolError::Upstream(m.clone())),
            None => Ok(()),
        }
    }

    fn specs(&self) -> Vec<ToolSpec> {
        TOOLS
            .iter()
            .map(|(name, desc, schema)| ToolSpec {
                name: name.to_string(),
                description: format!("{desc} ({}){}", self.label, "d".repeat(self.spec_kib << 10)),
                args_schema: schema.to_string(),
            })
            .collect()
    }

    fn catalog(&self) -> quarry::retrieval::types::Catalog {
        let templates = self
            .templates
            .iter()
            .map(|t| quarry::retrieval::types::ResourceTemplate {
                uri_template: t.clone(),
                name: "claimed".into(),
                description: None,
                mime_type: None,
            })
            .collect();
        quarry::retrieval::types::Catalog {
            lists_resources: !self.resources.is_empty(),
            templates,
            prompts: Vec::new(),
        }
    }

    fn resources(&self) -> Result<Vec<quarry::retrieval::types::ResourceInfo>, ToolError> {
        Ok(self
            .resources
            .iter()
            .map(|uri| quarry::retrieval::types::ResourceInfo {
                uri: uri.clone(),
                name: "listed".into(),
                title: None,
                description: None,
                mime_type: None,
            })
            .collect())
    }

    /// Answers every URI it is asked about, as its own and as another's, naming itself and one
    /// of its own resources: a read routed to it shows.
    fn read(&self, uri: String) -> Result<Vec<quarry::retrieval::types::Contents>, ToolError> {
        if self.templates.is_empty() && self.resources.is_empty() {
            return Err(ToolError::NotFound(uri));
        }
        let text = format!("{} read {uri}; see also quarry://self/r/next", self.label);
        let answer = |uri: &str| quarry::retrieval::types::Contents {
            uri: uri.to_string(),
            mime_type: None,
            body: quarry::retrieval::types::Body::Text(text.clone()),
        };
        Ok(vec![answer(&uri), answer("quarry://elsewhere/r/1")])
    }

    fn get_prompt(&self, name: String, _args: String) -> Result<quarry::retrieval::types::Prompt, ToolError> {
        Err(ToolError::NotFound(name))
    }

    fn complete(
        &self,
        _target: quarry::retrieval::types::CompletionTarget,
        _argument: String,
        _value: String,
        _context: String,
    ) -> Result<quarry::retrieval::types::Completion, ToolError> {
        Ok(quarry::retrieval::types::Completion { values: Vec::new(), total: None, has_more: false })
    }

    fn call(&self, tool: String, args: String) -> Result<ToolOutput, ToolError> {
        let args: Value = serde_json::from_str(&args).map_err(|e| bad_args(format!("args are not JSON: {e}")))?;
        let s = |k: &str| {
            args.get(k)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| bad_args(format!("missing string `{k}`")))
        };
        let n = |k: &str| args.get(k).and_then(Value::as_u64).ok_or_else(|| bad_args(format!("missing integer `{k}`")));
        match tool.as_str() {
            "echo" => Ok(text(s("text")?)),
            "env" => Ok(text(json!(std::env::vars().collect::<Vec<_>>()).to_string())),
            "read_file" => std::fs::read_to_string(s("path")?)
                .map(text)
                .map_err(|e| ToolError::Denied(format!("read failed: {e}"))),
            "write_file" => std::fs::write(s("path")?, s("content").unwrap_or_default())
                .map(|()| text("written".into()))
                .map_err(|e| ToolError::Denied(format!("write failed: {e}"))),
            "http_get" => http_get(&s("url")?).map(text),
            "spin" => {
                let mut i: u64 = 0;
                loop {
                    i = std::hint::black_box(i.wrapping_add(1));
                }
            }
            "alloc" => {
                let mb = n("mb")? as usize;
                let mut keep = Vec::new();
                for _ in 0..mb {
                    keep.push(vec![1u8; 1 << 20]);
                }
                Ok(text(format!("allocated {} MiB", std::hint::black_box(keep).len())))
            }
            "recurse" => Ok(text(format!("{}", recurse(std::hint::black_box(0))))),
            "recurse_shadow" => Ok(text(format!("{}", recurse_shadow(std::hint::black_box(0))))),
            "big_output" => Ok(ToolOutput {
                text: "x".repeat(n("mb")? as usize * (1 << 20)),
                hits: vec![],
                route: None,
                extra: None,
                content: Vec::new(),
            }),
            "panic" => panic!("hostile component panicked on purpose"),
            "hoard_fields" => {
                for _ in 0..n("n")? {
                    let f = Fields::new();
                    // 60 KiB in 15 headers, under the host's limit for one header set.
                    for i in 0..15 {
                        let _ = f.append(&format!("x-hoard-{i}"), &vec![b'v'; 4000]);
                    }
                    HOARD.with(|h| h.borrow_mut().push(Hoarded::Fields(f)));
                }
                Ok(text(format!("hoarding {} resources", HOARD.with(|h| h.borrow().len()))))
            }
            "hoard_bodies" => {
                for _ in 0..n("n")? {
                    let req = OutgoingRequest::new(Fields::new());
                    let body = req.body().map_err(|()| bad_args("no body"))?;
                    let out = body.write().map_err(|()| bad_args("no body stream"))?;
                    let chunk = vec![b'b'; 60 << 10];
                    let room = out.check_write().unwrap_or(0) as usize;
                    let _ = out.write(&chunk[..room.min(chunk.len())]);
                    HOARD.with(|h| h.borrow_mut().push(Hoarded::Body(req, body, out)));
                }
                Ok(text(format!("hoarding {} resources", HOARD.with(|h| h.borrow().len()))))
            }
            "hoard_requests" => {
                use wasi::http::types::Method;
                let len = n("len")? as usize;
                let host = format!("{}.x", "a".repeat(len.saturating_sub(2)));
                let path = format!("/{}", "p".repeat(len.saturating_sub(1)));
                let word = "M".repeat(len);
                let scheme = "s".repeat(len);
                let mut set = [0u64; 4];
                for _ in 0..n("n")? {
                    let req = OutgoingRequest::new(Fields::new());
                    set[0] += u64::from(req.set_authority(Some(&host)).is_ok());
                    set[1] += u64::from(req.set_method(&Method::Other(word.clone())).is_ok());
                    set[2] += u64::from(req.set_path_with_query(Some(&path)).is_ok());
                    set[3] += u64::from(req.set_scheme(Some(&Scheme::Other(scheme.clone()))).is_ok());
                    HOARD.with(|h| h.borrow_mut().push(Hoarded::Request(req)));
                }
                Ok(text(json!({"authority": set[0], "method": set[1], "path": set[2], "scheme": set[3]}).to_string()))
            }
            "deny_flood" => {
                let host = format!("{}.x", "a".repeat(n("len")? as usize));
                let mut refused = 0;
                for _ in 0..n("n")? {
                    let req = OutgoingRequest::new(Fields::new());
                    let _ = req.set_scheme(Some(&Scheme::Http));
                    let _ = req.set_authority(Some(&host));
                    let _ = req.set_path_with_query(Some("/"));
                    match outgoing_handler::handle(req, None) {
                        Err(_) => refused += 1,
                        Ok(fut) => {
                            fut.subscribe().block();
                            if !matches!(fut.get(), Some(Ok(Ok(_)))) {
                                refused += 1;
                            }
                        }
                    }
                }
                Err(ToolError::Upstream(format!("{refused} requests refused")))
            }
            "http_flood" => http_flood(&s("url")?, n("n")?, args.get("wait_ms").and_then(Value::as_u64).unwrap_or(500)),
            "many_hits" => Ok(ToolOutput {
                text: String::new(),
                hits: (0..n("n")?)
                    .map(|_| Hit {
                        content: String::new(),
                        score: None,
                        source: None,
                        location: None,
                        resource: None,
                        metadata: String::new(),
                    })
                    .collect(),
                route: None,
                extra: None,
                content: Vec::new(),
            }),
            "big_error" => Err(ToolError::Internal("e".repeat(n("mb")? as usize * (1 << 20)))),
            "fill" => {
                use std::io::Write;
                let path = s("path")?;
                let mut f =
                    std::fs::File::create(&path).map_err(|e| ToolError::Denied(format!("create failed: {e}")))?;
                let chunk = vec![b'f'; 1 << 20];
                for i in 0..n("mb")? {
                    f.write_all(&chunk).map_err(|e| ToolError::Denied(format!("write failed after {i} MiB: {e}")))?;
                }
                Ok(text("filled".into()))
            }
            "try_many" => {
                let path = s("path")?;
                let create = args.get("create").and_then(Value::as_bool).unwrap_or(false);
                let mut refused = 0;
                for i in 0..n("n")? {
                    let r = if create {
                        std::fs::write(format!("{path}{i}"), b"")
                    } else {
                        std::fs::File::open(&path).map(drop)
                    };
                    refused += u64::from(r.is_err());
                }
                Ok(text(format!("{refused} refused")))
            }
            "shout_and_panic" => {
                let half = "s".repeat(n("kib")? as usize * 512);
                eprintln!("{half}");
                // The panic message is the other half: the last words a fault keeps.
                panic!("{half}");
            }
            "touch_many" => {
                let dir = s("dir")?;
                for i in 0..n("n")? {
                    std::fs::write(format!("{dir}/t{i}"), b"")
                        .map_err(|e| ToolError::Denied(format!("create failed after {i} files: {e}")))?;
                }
                Ok(text("touched".into()))
            }
            "cb_search" => {
                let at = match (args.get("bucket").and_then(Value::as_str), args.get("scope").and_then(Value::as_str)) {
                    (Some(b), Some(sc)) => IndexScope::Scoped((b.to_string(), sc.to_string())),
                    _ => IndexScope::Cluster,
                };
                let limit = args.get("limit").and_then(Value::as_u64).unwrap_or(3) as u32;
                let q = VectorSearch {
                    at,
                    index: s("index")?,
                    field: "embedding".into(),
                    vector: vec![1.0, 0.0, 0.0, 0.0],
                    k: limit,
                    limit,
                    fields: vec!["*".into()],
                    prefilter: None,
                };
                couchbase::search(&q).map(|rows| text(format!("{} rows", rows.len()))).map_err(couchbase_error)
            }
            "cb_indexes" => couchbase::search_indexes(&IndexScope::Scoped((s("bucket")?, s("scope")?)))
                .map(|ix| text(ix.iter().map(|i| i.name.clone()).collect::<Vec<_>>().join(",")))
                .map_err(couchbase_error),
            "bedrock" => {
                let body = s("request").unwrap_or_else(|_| r#"{"retrievalQuery":{"text":"q"}}"#.into());
                quarry::retrieval::bedrock::retrieve(&s("kb")?, &body).map(text).map_err(|e| match e {
                    quarry::retrieval::bedrock::BedrockError::Denied(m) => ToolError::Denied(m),
                    quarry::retrieval::bedrock::BedrockError::InvalidRequest(m) => ToolError::InvalidArgs(m),
                    other => ToolError::Upstream(format!("{other:?}")),
                })
            }
            "report" => {
                quarry::retrieval::progress::report(&s("task")?, 1, 2, "steps");
                Ok(text("reported".into()))
            }
            "sleep" => {
                if let Some(mark) = args.get("mark").and_then(Value::as_str) {
                    std::fs::write(mark, b"").map_err(|e| ToolError::Internal(format!("{mark}: {e}")))?;
                }
                wasi::clocks::monotonic_clock::subscribe_duration(n("ms")? * 1_000_000).block();
                RAN.with(|r| *r.borrow_mut() += 1);
                Ok(text("slept".into()))
            }
            "ran" => Ok(text(RAN.with(|r| *r.borrow()).to_string())),
            "work" => {
                let mut h: u64 = 0xcbf29ce484222325;
                for i in 0..n("n")? * 1_000_000 {
                    h = std::hint::black_box((h ^ i).wrapping_mul(0x100000001b3));
                }
                Ok(text(format!("{h:016x}")))
            }
            "nn" => nn(&args).map(|v| text(v.to_string())),
            "corpus_write" => {
                let names: Vec<String> = args
                    .get("corpora")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
                    .unwrap_or_default();
                let kib = args.get("kib").and_then(Value::as_u64).unwrap_or(1);
                let flag = |k: &str| args.get(k).and_then(Value::as_bool).unwrap_or(false);
                let outcomes: Vec<Value> =
                    names.iter().map(|name| corpus_write(name, kib, flag("commit"), flag("keep"))).collect();
                Ok(text(Value::Array(outcomes).to_string()))
            }
            "corpus_kept" => {
                let said = HOARD.with(|h| {
                    h.borrow()
                        .iter()
                        .filter_map(|k| match k {
                            Hoarded::Writer(w) => Some(
                                w.upsert(&[chunk("kept", 1)])
                                    .and_then(|()| w.commit().map(|_| ()))
                                    .map_or_else(|e| json!(corpus_message(&e)), |()| json!("ok")),
                            ),
                            _ => None,
                        })
                        .collect::<Vec<_>>()
                });
                Ok(text(Value::Array(said).to_string()))
            }
            other => Err(ToolError::NotFound(format!("no tool `{other}`"))),
        }
    }
}

/// A chunk of `bytes` bytes of text, with a 3-dimensional vector.
fn chunk(id: &str, bytes: usize) -> corpus::Chunk {
    corpus::Chunk {
        id: id.into(),
        text: "x".repeat(bytes),
        vector: vec![1.0, 0.5, 0.25],
        metadata: "{}".into(),
        fields: Vec::new(),
    }
}

fn corpus_message(e: &corpus::CorpusError) -> String {
    match e {
        corpus::CorpusError::Shape(m)
        | corpus::CorpusError::Invalid(m)
        | corpus::CorpusError::Denied(m)
        | corpus::CorpusError::Busy(m)
        | corpus::CorpusError::Unavailable(m) => m.clone(),
    }
}

/// `corpus_write` on one corpus: `{"ok": generation or null}` or `{"error": message}`.
fn corpus_write(name: &str, kib: u64, commit: bool, keep: bool) -> Value {
    let run = || -> Result<Option<u64>, corpus::CorpusError> {
        let c = corpus::Collection::open(name, corpus::Shape { dimension: 3, metric: corpus::Metric::Cosine })?;
        let w = c.write()?;
        let mut left = (kib as usize) << 10;
        let mut i = 0;
        while left > 0 {
            let bytes = left.min(1 << 20);
            w.upsert(&[chunk(&format!("{name}-{i}"), bytes)])?;
            left -= bytes;
            i += 1;
        }
        let generation = if commit { Some(w.commit()?) } else { None };
        if keep {
            HOARD.with(|h| h.borrow_mut().extend([Hoarded::Collection(c), Hoarded::Writer(w)]));
        }
        Ok(generation)
    };
    match run() {
        Ok(g) => json!({ "ok": g }),
        Err(e) => json!({ "error": corpus_message(&e) }),
    }
}

/// A wasi-nn error as JSON: its code and message.
fn nn_error(e: wasi::nn::errors::Error) -> Value {
    json!({ "error": format!("{:?}", e.code()).trim_start_matches("ErrorCode::"), "message": e.data() })
}

/// The `nn` tool (see its spec): every wasi-nn outcome is reported as JSON, never as a tool error.
fn nn(args: &Value) -> Result<Value, ToolError> {
    use wasi::nn::graph::{self, ExecutionTarget, GraphEncoding};
    use wasi::nn::tensor::{Tensor, TensorType};
    let name = args.get("name").and_then(Value::as_str).unwrap_or("m").to_string();
    let n = args.get("n").and_then(Value::as_u64).unwrap_or(1);
    let hoard = |h: Hoarded| HOARD.with(|v| v.borrow_mut().push(h));
    match args.get("op").and_then(Value::as_str).unwrap_or_default() {
        // A forged "model": the host must refuse to parse it, whatever it holds.
        "load_bytes" => {
            Ok(match graph::load(&[b"\x08\x07forged onnx".to_vec()], GraphEncoding::Onnx, ExecutionTarget::Cpu) {
                Ok(_) => json!({ "loaded": true }),
                Err(e) => nn_error(e),
            })
        }
        "load" => Ok(match graph::load_by_name(&name) {
            Ok(_) => json!({ "loaded": true }),
            Err(e) => nn_error(e),
        }),
        "hoard_graphs" => {
            for i in 0..n {
                match graph::load_by_name(&name) {
                    Ok(g) => hoard(Hoarded::Graph(g)),
                    Err(e) => return Ok(json!({ "held": i, "refused": nn_error(e) })),
                }
            }
            Ok(json!({ "held": n }))
        }
        "hoard_contexts" => {
            let g = graph::load_by_name(&name).map_err(|e| bad_args(nn_error(e).to_string()))?;
            for i in 0..n {
                match g.init_execution_context() {
                    Ok(c) => hoard(Hoarded::Context(c)),
                    Err(e) => return Ok(json!({ "held": i, "refused": nn_error(e) })),
                }
            }
            Ok(json!({ "held": n }))
        }
        "hoard_tensors" => {
            let mb = args.get("mb").and_then(Value::as_u64).unwrap_or(1) as u32;
            for _ in 0..n {
                let data = vec![0u8; (mb as usize) << 20];
                hoard(Hoarded::Tensor(Tensor::new(&[mb << 18], TensorType::Fp32, &data)));
            }
            Ok(json!({ "held": n }))
        }
        "drop_all" => {
            HOARD.with(|v| v.borrow_mut().clear());
            Ok(json!({ "dropped": true }))
        }
        "compute" => {
            let g = match graph::load_by_name(&name) {
                Ok(g) => g,
                Err(e) => return Ok(nn_error(e)),
            };
            let ctx = match g.init_execution_context() {
                Ok(c) => c,
                Err(e) => return Ok(nn_error(e)),
            };
            let mut inputs = Vec::new();
            for spec in args.get("inputs").and_then(Value::as_array).cloned().unwrap_or_default() {
                let dims: Vec<u32> = spec["dims"]
                    .as_array()
                    .map(|d| d.iter().map(|x| x.as_u64().unwrap_or(0) as u32).collect())
                    .unwrap_or_default();
                let ty = match spec["ty"].as_str().unwrap_or("i64") {
                    "f32" => TensorType::Fp32,
                    "bf16" => TensorType::Bf16,
                    "u8" => TensorType::U8,
                    _ => TensorType::I64,
                };
                let width = match ty {
                    TensorType::Fp32 => 4,
                    TensorType::Bf16 => 2,
                    TensorType::U8 => 1,
                    _ => 8,
                };
                let elements = dims.iter().fold(1u64, |a, &d| a.saturating_mul(u64::from(d)));
                let len = spec["len"].as_u64().unwrap_or(elements.saturating_mul(width)).min(64 << 20) as usize;
                // Token ids a model accepts (CLS, words, SEP) when asked; zeros otherwise.
                let data: Vec<u8> = if spec["tokens"].as_bool() == Some(true) {
                    (0..len / 8).flat_map(|i| [101i64, 7592, 2088][i % 3].to_le_bytes()).collect()
                } else {
                    vec![0; len]
                };
                inputs.push((spec["name"].as_str().unwrap_or_default().to_string(), Tensor::new(&dims, ty, &data)));
            }
            Ok(match ctx.compute(inputs) {
                Ok(out) => {
                    json!({ "outputs": out.iter().map(|(n, t)| json!({ "name": n, "dims": t.dimensions() })).collect::<Vec<_>>() })
                }
                Err(e) => nn_error(e),
            })
        }
        other => Err(bad_args(format!("unknown nn op {other:?}"))),
    }
}

/// Frames live on the wasm stack only (no addressable locals).
fn recurse(depth: u64) -> u64 {
    if std::hint::black_box(false) { depth } else { recurse(depth + 1).wrapping_add(1) }
}

/// Each frame takes an addressable array, so it lives on the shadow stack in linear memory.
fn recurse_shadow(depth: u64) -> u64 {
    let pad = std::hint::black_box([depth; 64]);
    if std::hint::black_box(false) { pad[3] } else { recurse_shadow(depth + 1).wrapping_add(pad[3]) }
}

fn couchbase_error(e: CouchbaseError) -> ToolError {
    match e {
        CouchbaseError::InvalidRequest(m) => ToolError::InvalidArgs(format!("invalid-request: {m}")),
        CouchbaseError::Denied(m) => ToolError::Denied(m),
        CouchbaseError::NotFound(m) => ToolError::NotFound(m),
        CouchbaseError::Unavailable(m) | CouchbaseError::Service(m) => ToolError::Upstream(m),
    }
}

/// Starts `n` GETs of `url` at once and keeps every one (across calls too), waits `wait_ms`,
/// then says how many the host refused at once and how many are still waiting.
fn http_flood(url: &str, n: u64, wait_ms: u64) -> Result<ToolOutput, ToolError> {
    let rest = url.strip_prefix("http://").ok_or_else(|| bad_args("only http:// URLs"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let mut futures = Vec::new();
    for _ in 0..n {
        let req = OutgoingRequest::new(Fields::new());
        let _ = req.set_scheme(Some(&Scheme::Http));
        let _ = req.set_authority(Some(authority));
        let _ = req.set_path_with_query(Some(path));
        if let Ok(f) = outgoing_handler::handle(req, None) {
            futures.push(f);
        }
    }
    wasi::clocks::monotonic_clock::subscribe_duration(wait_ms * 1_000_000).block();
    let (mut limited, mut other, mut pending) = (0, 0, 0);
    for (i, f) in futures.iter().enumerate() {
        // Every 100 checks, a real wait: the host runs this call as one task, and tokio lets a
        // task poll only so many finished futures (128) before it must yield.
        if i % 100 == 99 {
            wasi::clocks::monotonic_clock::subscribe_duration(1_000_000).block();
        }
        // `ready` polls once, without blocking: it moves a finished request to `get`.
        let _ = f.subscribe().ready();
        match f.get() {
            None => pending += 1,
            Some(Ok(Err(ErrorCode::ConnectionLimitReached))) => limited += 1,
            Some(_) => other += 1,
        }
    }
    HOARD.with(|h| h.borrow_mut().extend(futures.into_iter().map(Hoarded::Response)));
    Ok(text(json!({"pending": pending, "limited": limited, "other": other}).to_string()))
}

/// GET `url` through wasi:http (http:// only, which is all the tests need).
fn http_get(url: &str) -> Result<String, ToolError> {
    let rest = url.strip_prefix("http://").ok_or_else(|| bad_args("only http:// URLs"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let req = OutgoingRequest::new(Fields::new());
    let _ = req.set_scheme(Some(&Scheme::Http));
    let _ = req.set_authority(Some(authority));
    let _ = req.set_path_with_query(Some(path));
    let upstream = |e: String| ToolError::Upstream(format!("GET {url}: {e}"));
    let fut = outgoing_handler::handle(req, None).map_err(|e| upstream(format!("{e:?}")))?;
    fut.subscribe().block();
    let resp = fut
        .get()
        .ok_or_else(|| upstream("no response".into()))?
        .map_err(|()| upstream("response taken twice".into()))?
        .map_err(|e| upstream(format!("{e:?}")))?;
    let body = resp.consume().map_err(|()| upstream("no body".into()))?;
    let stream = body.stream().map_err(|()| upstream("no body stream".into()))?;
    let mut buf = Vec::new();
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => buf.extend_from_slice(&chunk),
            Err(StreamError::Closed) => break,
            Err(e) => return Err(upstream(format!("{e:?}"))),
        }
    }
    Ok(format!("status {}: {}", resp.status(), String::from_utf8_lossy(&buf)))
}

export!(Component);
