//! A deliberately hostile tool: every tool here tries something the host must
//! contain (reading outside its preopen, writing a read-only dir, HTTP to
//! forbidden addresses, spinning forever, exhausting memory or stack, huge
//! output, panicking). `echo` and `env` are the well-behaved controls.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "http-tool",
    generate_all,
});

use exports::quarry::retrieval::tool::{Guest, GuestInstance, Instance};
use quarry::retrieval::types::{Hit, ToolError, ToolOutput, ToolSpec};
use serde_json::{Value, json};
use wasi::http::outgoing_handler;
use wasi::http::types::{Fields, OutgoingRequest, Scheme};
use wasi::io::streams::StreamError;

struct Component;

struct Hostile {
    label: String,
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
        hits: vec![Hit { content: s, score: None, source: None, metadata: "{}".into() }],
        extra: None,
    }
}

impl GuestInstance for Hostile {
    fn open(config: String) -> Result<Instance, ToolError> {
        let cfg: Value =
            serde_json::from_str(&config).map_err(|e| ToolError::InvalidConfig(format!("config is not JSON: {e}")))?;
        let obj = cfg.as_object().ok_or_else(|| ToolError::InvalidConfig("config must be an object".into()))?;
        if let Some(k) = obj.keys().find(|k| *k != "label") {
            return Err(ToolError::InvalidConfig(format!("unknown config key `{k}`; accepted: label")));
        }
        let label = obj.get("label").and_then(Value::as_str).unwrap_or("hostile").to_string();
        Ok(Instance::new(Hostile { label }))
    }

    fn specs(&self) -> Vec<ToolSpec> {
        TOOLS
            .iter()
            .map(|(name, desc, schema)| ToolSpec {
                name: name.to_string(),
                description: format!("{desc} ({})", self.label),
                args_schema: schema.to_string(),
            })
            .collect()
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
            "big_output" => {
                Ok(ToolOutput { text: "x".repeat(n("mb")? as usize * (1 << 20)), hits: vec![], extra: None })
            }
            "panic" => panic!("hostile component panicked on purpose"),
            other => Err(ToolError::NotFound(format!("no tool `{other}`"))),
        }
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
