//! The component: WIT glue around [`crate::tool`]. Files come through the preopens the host
//! granted, URLs through wasi:http (the host's policy decides what may be reached), vectors
//! through the host-linked embedder.

wit_bindgen::generate!({
    path: "../../wit",
    world: "docx-search",
    // Quarry's own interfaces are bound once, in tool-guest, for every RAG component.
    with: {
        "quarry:retrieval/types@0.6.0": tool_guest::types,
        "quarry:retrieval/embedder@0.6.0": tool_guest::embedder,
        "quarry:retrieval/progress@0.6.0": tool_guest::progress,
        "quarry:retrieval/corpus@0.6.0": tool_guest::corpus,
    },
    generate_all,
});

use std::cell::RefCell;
use std::time::Duration;

use tool_guest::GuestEnv;
use tool_guest::tool::{Output, Spec, check_tool};
use wasi::clocks::monotonic_clock;
use wasi::http::outgoing_handler;
use wasi::http::types::{ErrorCode, Fields, OutgoingRequest, RequestOptions, Scheme};
use wasi::io::streams::StreamError;

use crate::tool::{self, DocxTool, Env};

/// The component's view of the world: tool-guest's, plus the preopens and wasi:http.
fn env() -> GuestEnv {
    GuestEnv { file_kind: "a DOCX file" }
}

impl Env for GuestEnv {
    fn granted_dirs(&self) -> Vec<String> {
        wasi::filesystem::preopens::get_directories().into_iter().map(|(_, path)| path).collect()
    }

    fn fetch(&self, url: &str, timeout: Duration, max_bytes: u64) -> Result<Vec<u8>, tool::ToolError> {
        fetch(url, timeout, max_bytes)
    }
}

/// GETs `url` through wasi:http: every phase bounded by `timeout`, the whole download too, and
/// at most `max_bytes` of body.
fn fetch(url: &str, timeout: Duration, max_bytes: u64) -> Result<Vec<u8>, tool::ToolError> {
    let bad =
        |m: String| tool::ToolError::InvalidArgs(format!("Source must be a valid file path or URL, got: {url} ({m})"));
    let (scheme, rest) = if let Some(r) = url.strip_prefix("https://") {
        (Scheme::Https, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (Scheme::Http, r)
    } else {
        return Err(bad("only http and https URLs are fetched".into()));
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
        Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
        None => (rest, "/".to_string()),
    };
    if authority.is_empty() || authority.contains('@') {
        return Err(bad("no host, or credentials in the URL".into()));
    }
    let upstream = |m: String| tool::ToolError::Upstream(format!("download of {url} failed: {m}"));
    let req = OutgoingRequest::new(Fields::new());
    req.set_scheme(Some(&scheme)).map_err(|()| bad("bad scheme".into()))?;
    req.set_authority(Some(authority)).map_err(|()| bad("bad host".into()))?;
    req.set_path_with_query(Some(&path)).map_err(|()| bad("bad path".into()))?;
    let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
    let options = RequestOptions::new();
    let _ = options.set_connect_timeout(Some(nanos));
    let _ = options.set_first_byte_timeout(Some(nanos));
    let _ = options.set_between_bytes_timeout(Some(nanos));
    let started = monotonic_clock::now();
    let fut = outgoing_handler::handle(req, Some(options)).map_err(|e| refused(url, e))?;
    fut.subscribe().block();
    let resp = fut
        .get()
        .ok_or_else(|| upstream("no response".into()))?
        .map_err(|()| upstream("response taken twice".into()))?
        .map_err(|e| refused(url, e))?;
    let status = resp.status();
    if !(200..300).contains(&status) {
        return Err(upstream(format!("HTTP status {status}")));
    }
    let body = resp.consume().map_err(|()| upstream("no body".into()))?;
    let stream = body.stream().map_err(|()| upstream("no body stream".into()))?;
    let mut buf = Vec::new();
    loop {
        if monotonic_clock::now().saturating_sub(started) > nanos {
            return Err(upstream(format!("it took longer than {}s", timeout.as_secs())));
        }
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => {
                buf.extend_from_slice(&chunk);
                if buf.len() as u64 > max_bytes {
                    return Err(tool::ToolError::InvalidArgs(format!(
                        "{url} is larger than the {max_bytes}-byte limit (config max_bytes)"
                    )));
                }
            }
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(e)) => {
                return Err(match wasi::http::types::http_error_code(&e) {
                    Some(code) => refused(url, code),
                    None => {
                        let m = e.to_debug_string();
                        upstream(if m.contains("timeout") { format!("timed out ({m})") } else { m })
                    }
                });
            }
        }
    }
    Ok(buf)
}

/// The host's refusals are `Blocked unsafe URL`, as CrewAI words them; the rest are upstream
/// failures.
fn refused(url: &str, e: ErrorCode) -> tool::ToolError {
    match e {
        ErrorCode::HttpRequestDenied => tool::ToolError::Denied(format!(
            "Blocked unsafe URL {url}: the host's policy does not allow this address (grants.http, grants.private_networks)"
        )),
        ErrorCode::ConnectionReadTimeout | ErrorCode::ConnectionTimeout | ErrorCode::HttpResponseTimeout => {
            tool::ToolError::Upstream(format!("download of {url} timed out ({e:?})"))
        }
        other => tool::ToolError::Upstream(format!("download of {url} failed: {other:?}")),
    }
}

/// One instance; calls come one at a time, the RefCell only satisfies `&self`.
struct Docx(RefCell<DocxTool<GuestEnv>>);

impl tool_guest::Tools for Docx {
    fn open(config: &str) -> Result<Docx, tool::ToolError> {
        Ok(Docx(RefCell::new(DocxTool::configure(config, env())?)))
    }

    fn prepare(&self) -> Result<(), tool::ToolError> {
        self.0.borrow_mut().prepare()
    }

    fn specs(&self) -> Vec<Spec> {
        let t = self.0.borrow();
        vec![t.spec()]
    }

    fn call(&self, name: &str, args: &str) -> Result<Output, tool::ToolError> {
        check_tool(name, tool::TOOL_NAME)?;
        self.0.borrow_mut().call(args)
    }

    fn catalog(&self) -> tool_guest::catalog::Catalog {
        tool_guest::catalog::Catalog { lists_resources: true, ..Default::default() }
    }

    fn resources(&self) -> Result<Vec<tool_guest::catalog::Resource>, tool::ToolError> {
        self.0.borrow().resources()
    }

    fn read(&self, uri: &str) -> Result<Vec<tool_guest::catalog::Contents>, tool::ToolError> {
        self.0.borrow().read(uri)
    }
}

tool_guest::export_tools!(Docx);
