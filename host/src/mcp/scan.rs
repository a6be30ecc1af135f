//! A look at a JSON-RPC message before any JSON tree is built from it.
//!
//! A parsed JSON tree costs many times its text: every number, string, array and object is a
//! 32-byte node, and arrays and maps grow by doubling (an 8 MiB body peaked at 114× its size
//! when it was parsed by the server, again by rmcp, and its arguments serialised again). So
//! the server reads a message's envelope with borrowed values (`method` decoded as rmcp decodes
//! it, `id`, the raw text of `params.arguments`), counts its nodes in one pass over the bytes,
//! and refuses what is too large before any tree exists. Whether a message is an `initialize`
//! is read from the envelope too: the one tree built of a message is rmcp's.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

/// What the host charges for one node of a parsed JSON tree: its 32-byte value, its share of
/// a vector or map grown by doubling (and the old buffer while it is copied), a map entry's
/// key, and serde's buffer of the same node while rmcp's untagged message types try their
/// variants. Set from `make bench-hostile` (the "dense 800 KB bodies" row): at 96 bytes, 16
/// such bodies at once took the server from 23 to 221 MiB under a 128 MiB budget.
pub const NODE_BYTES: usize = 256;

/// A message's envelope, read without building a tree.
#[derive(Debug)]
pub struct Envelope<'a> {
    /// `method`, decoded as rmcp decodes it (`"initializ\u0065"` is `initialize`).
    pub method: Option<Cow<'a, str>>,
    /// `id`, as written (a string or a number for a request).
    pub id: Option<&'a RawValue>,
    /// `params.arguments` as written, for `tools/call`.
    pub arguments: Option<&'a RawValue>,
    /// Nodes of the tree the message would parse into.
    pub nodes: usize,
}

impl Envelope<'_> {
    /// Bytes of `params.arguments` as written (0 without them).
    pub fn arguments_len(&self) -> usize {
        self.arguments.map_or(0, |a| a.get().len())
    }

    /// The `id` as a JSON value, for an error answer (null when it is not a string or number).
    pub fn id_value(&self) -> serde_json::Value {
        self.id
            .and_then(|raw| serde_json::from_str::<serde_json::Value>(raw.get()).ok())
            .filter(|id| id.is_string() || id.is_number())
            .unwrap_or(serde_json::Value::Null)
    }

    /// Whether the message is an `initialize` request, as rmcp would decode it.
    pub fn is_initialize(&self) -> bool {
        self.id.is_some() && self.method.as_deref() == Some("initialize")
    }

    /// What parsing the message into a tree would cost, by [`NODE_BYTES`].
    pub fn tree_bytes(&self) -> usize {
        self.nodes.saturating_mul(NODE_BYTES)
    }
}

/// Why a message could not be read.
#[derive(Debug, PartialEq)]
pub enum ScanError {
    /// Not JSON at all (-32700).
    Syntax(String),
    /// JSON, but not one JSON-RPC message object (-32600).
    Shape(String),
}

impl ScanError {
    /// The JSON-RPC error code it is answered with.
    pub fn code(&self) -> i64 {
        match self {
            ScanError::Syntax(_) => -32700,
            ScanError::Shape(_) => -32600,
        }
    }
}

/// What a parse error is: not JSON at all (or cut short), or JSON of another shape.
impl From<serde_json::Error> for ScanError {
    fn from(e: serde_json::Error) -> Self {
        if e.is_syntax() || e.is_eof() { ScanError::Syntax(e.to_string()) } else { ScanError::Shape(e.to_string()) }
    }
}

#[derive(Deserialize)]
struct RawEnvelope<'a> {
    /// Decoded as rmcp decodes it (`"tools/c\u0061ll"` is `tools/call`).
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct RawCallParams<'a> {
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
}

/// The `id` of a message whose envelope could not be read (its `method` is not a string, say),
/// when it has a string or number one; null otherwise. Builds no tree.
pub fn id_of(bytes: &[u8]) -> serde_json::Value {
    #[derive(Deserialize)]
    struct IdOnly<'a> {
        #[serde(borrow, default)]
        id: Option<&'a RawValue>,
    }
    let id = serde_json::from_slice::<IdOnly<'_>>(bytes).ok().and_then(|m| m.id);
    Envelope { method: None, id, arguments: None, nodes: 0 }.id_value()
}

/// Reads the envelope of `bytes`. Validates the JSON's syntax in full (without a tree) and
/// counts its nodes.
pub fn envelope(bytes: &[u8]) -> Result<Envelope<'_>, ScanError> {
    let raw: RawEnvelope<'_> = serde_json::from_slice(bytes)?;
    let arguments = match (&raw.method, raw.params) {
        (Some(m), Some(params)) if m == "tools/call" => {
            serde_json::from_str::<RawCallParams<'_>>(params.get())
                .map_err(|e| ScanError::Shape(format!("params: {e}")))?
                .arguments
        }
        _ => None,
    };
    Ok(Envelope { method: raw.method, id: raw.id, arguments, nodes: nodes(bytes) })
}

/// The arguments of a `tools/call` refused for their size (over
/// [`MAX_ARGS_BYTES`](crate::args::MAX_ARGS_BYTES)) where the message was read: their size,
/// and their first bytes for the call log. The transport hands it to the handler out of band,
/// in the request's extensions, beside the message with the arguments replaced by `{}`
/// ([`refuse_large_arguments`]): no tree of them is ever built, the call is answered and logged
/// as a tool error, and nothing a client writes can pose as it.
#[derive(Debug, Clone, PartialEq)]
pub struct RefusedArguments {
    /// Their size, in bytes.
    pub bytes: usize,
    /// Their first bytes (at most the call log's cut, on a character boundary).
    pub head: String,
}

/// How much of refused arguments is kept for the call log (its own cut).
const HEAD_BYTES: usize = crate::mcp::call_log::MAX_ARGS;

/// `bytes` with the arguments of a `tools/call` over
/// [`MAX_ARGS_BYTES`](crate::args::MAX_ARGS_BYTES) replaced by `{}`, and what was refused;
/// `None` when they fit.
pub fn refuse_large_arguments(bytes: &[u8], envelope: &Envelope<'_>) -> Option<(Vec<u8>, RefusedArguments)> {
    let args = envelope.arguments?.get();
    if crate::args::fits(args.len()) {
        return None;
    }
    // The raw value borrows from `bytes`: its place there is the difference of the pointers.
    let start = (args.as_ptr() as usize).checked_sub(bytes.as_ptr() as usize)?;
    let end = start.checked_add(args.len()).filter(|&e| e <= bytes.len())?;
    let mut cut = HEAD_BYTES;
    while !args.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut out = Vec::with_capacity(bytes.len() - args.len() + 2);
    out.extend_from_slice(&bytes[..start]);
    out.extend_from_slice(b"{}");
    out.extend_from_slice(&bytes[end..]);
    Some((out, RefusedArguments { bytes: args.len(), head: args[..cut].to_string() }))
}

/// Which edge a message came in by: the words its refusals use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edge {
    /// A POST body of Streamable HTTP.
    Http,
    /// A line of stdio.
    Stdio,
}

/// A message refused at the edge, as its client is told: the JSON-RPC error code, the message,
/// and the `id` to echo (null when none could be read).
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// -32700 (not JSON) or -32600 (not one JSON-RPC message).
    pub code: i64,
    /// What is wrong, and what to send instead.
    pub message: String,
    /// The message's `id`, or null.
    pub id: serde_json::Value,
}

impl Refusal {
    /// A message that is not one JSON-RPC message (`e`), that came in by `edge` with `id`.
    pub fn malformed(e: ScanError, id: serde_json::Value, edge: Edge) -> Refusal {
        let (unit, hint) = match edge {
            Edge::Http => ("body", ""),
            Edge::Stdio => ("message", "; send one JSON-RPC message per line"),
        };
        let message = match &e {
            ScanError::Syntax(e) => format!("parse error: the {unit} is not JSON ({e}){hint}"),
            ScanError::Shape(e) => {
                format!("invalid request: the {unit} is not a JSON-RPC 2.0 request, notification or response ({e})")
            }
        };
        Refusal { code: e.code(), message, id }
    }
}

/// A message admitted at the edge, before any tree: what the transport hands rmcp and charges.
#[derive(Debug)]
pub struct Admitted {
    /// The message with arguments over [`MAX_ARGS_BYTES`](crate::args::MAX_ARGS_BYTES) replaced
    /// by `{}`; `None` when it is the bytes as read.
    pub smaller: Option<Vec<u8>>,
    /// Its `id` (null when it has none a JSON-RPC error can echo).
    pub id: serde_json::Value,
    /// Whether it is an `initialize` request, as rmcp decodes it.
    pub initialize: bool,
    /// The arguments taken out, for the handler to answer ([`RefusedArguments`]).
    pub refused: Option<RefusedArguments>,
    /// What the one tree rmcp builds of the message costs ([`NODE_BYTES`] a node).
    pub tree: usize,
}

/// Admits `bytes`, one message as it came in by `edge`: reads its envelope (JSON, one message
/// object), takes out arguments over the bound (never parsed; the handler answers the call as a
/// tool error from what was refused, handed on in the request's extensions), and counts the
/// tree rmcp will build. Builds no tree; the transport charges [`Admitted::tree`].
pub fn admit(bytes: &[u8], edge: Edge) -> Result<Admitted, Refusal> {
    let envelope = envelope(bytes).map_err(|e| Refusal::malformed(e, id_of(bytes), edge))?;
    let (smaller, refused) = refuse_large_arguments(bytes, &envelope).unzip();
    let tree = match &smaller {
        Some(s) => nodes(s).saturating_mul(NODE_BYTES),
        None => envelope.tree_bytes(),
    };
    Ok(Admitted { id: envelope.id_value(), initialize: envelope.is_initialize(), smaller, refused, tree })
}

/// The nodes of the tree `json` parses into, counted from its bytes: one for the top value, and
/// one more for each `,`, `[`, `{` and `:` outside strings (each starts a value or a map entry).
pub fn nodes(json: &[u8]) -> usize {
    let (mut n, mut in_string, mut escaped) = (1usize, false, false);
    for &b in json {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b',' | b'[' | b'{' | b':' => n += 1,
                _ => {}
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::MAX_ARGS_BYTES;

    #[test]
    fn the_method_is_decoded_as_rmcp_decodes_it() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/c\u0061ll","params":{"name":"t","arguments":{"a":1}}}"#;
        let e = envelope(body).unwrap();
        assert_eq!(e.arguments_len(), r#"{"a":1}"#.len());
        assert_eq!(e.id_value(), serde_json::json!(1));
    }

    #[test]
    fn arguments_are_measured_without_a_tree() {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{{"name":"t","arguments":{{"text":"{}"}}}}}}"#,
            "x".repeat(1000)
        );
        let e = envelope(body.as_bytes()).unwrap();
        assert_eq!(e.arguments_len(), r#"{"text":""}"#.len() + 1000);
        assert_eq!(e.id_value(), serde_json::json!("a"));
        assert!(refuse_large_arguments(body.as_bytes(), &e).is_none(), "they fit");
        // Other methods' params are not looked into.
        let e = envelope(br#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"arguments":[1,2]}}"#).unwrap();
        assert_eq!(e.arguments_len(), 0);
    }

    #[test]
    fn large_arguments_are_taken_out() {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"a.b","arguments":{{"text":"é{}"}},"_meta":{{}}}}}}"#,
            "x".repeat(MAX_ARGS_BYTES)
        );
        let e = envelope(body.as_bytes()).unwrap();
        let (out, refused) = refuse_large_arguments(body.as_bytes(), &e).unwrap();
        assert!(out.len() < 200, "{} bytes", out.len());
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!((v["id"].clone(), v["params"]["name"].clone()), (serde_json::json!(7), serde_json::json!("a.b")));
        assert_eq!(v["params"]["arguments"], serde_json::json!({}));
        assert!(v["params"]["_meta"].is_object());
        assert_eq!(refused.bytes, e.arguments_len());
        assert!(
            refused.head.starts_with(r#"{"text":"éxx"#) && refused.head.len() <= HEAD_BYTES,
            "{}",
            refused.head.len()
        );
    }

    #[test]
    fn nodes_count_values_not_string_contents() {
        assert_eq!(nodes(b"1"), 1);
        assert_eq!(nodes(b"[0,0,0]"), 4);
        assert_eq!(nodes(br#"{"a":[1,2],"b":{}}"#), 8);
        // Commas, brackets and escaped quotes inside strings are text.
        assert_eq!(nodes(br#"["a,[{:\",b"]"#), 2);
        // A dense array is many nodes for few bytes.
        let dense = format!("[{}0]", "0,".repeat(1000));
        assert_eq!(nodes(dense.as_bytes()), 1002);
    }

    #[test]
    fn bad_messages_are_told_apart() {
        assert!(matches!(envelope(b"{not json"), Err(ScanError::Syntax(_))));
        assert!(matches!(envelope(b"[1,2]"), Err(ScanError::Shape(_))));
        assert!(matches!(envelope(br#"{"method":5}"#), Err(ScanError::Shape(_))));
        assert_eq!(id_of(br#"{"jsonrpc":"2.0","id":77,"method":42}"#), serde_json::json!(77));
        assert_eq!(id_of(br#"{"id":{"a":1}}"#), serde_json::Value::Null);
    }
}
