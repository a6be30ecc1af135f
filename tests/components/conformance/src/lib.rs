//! The reference server of the official MCP conformance suite (`@modelcontextprotocol/conformance`,
//! server mode), as one Quarry tool component: every tool, resource, template and prompt the
//! suite calls, for both requirement sets (2025-11-25 and 2026-07-28), including the 2026
//! diagnostic tools. The fixture config lists it with `bare_names = true`, so that its tools and
//! prompts keep the names the suite calls.
//!
//! Everything here goes through the host as any component's would: progress through
//! `progress`, log lines through stderr, questions to the client (sampling, elicitation, roots)
//! through `client.ask`, list changes through `client.changed`. A question whose answer comes
//! in a later round (a 2026-07-28 client) is `pending`: the tool asks what it needs and returns,
//! and the host answers with the questions.

wit_bindgen::generate!({
    path: "../../../wit",
    inline: "
        package quarry:conformance;
        world conformance {
            include quarry:retrieval/asking-tool@0.6.0;
            import quarry:retrieval/progress@0.6.0;
        }
    ",
    world: "quarry:conformance/conformance",
    generate_all,
});

use exports::quarry::retrieval::tool::{Guest, GuestInstance, Instance};
use quarry::retrieval::client::{self, AskError, ListKind, RequestKind};
use quarry::retrieval::types::{
    Body, Catalog, Completion, CompletionTarget, ContentBlock, Contents, Media, Prompt, PromptArgument, PromptMessage,
    PromptSpec, ResourceInfo, ResourceTemplate, Role, ToolError, ToolOutput, ToolSpec,
};
use serde_json::{Value, json};

struct Component;

/// The 1x1 PNG the suite's reference server returns.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00, 0x0d, 0x49,
    0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0xfc, 0xcf, 0xc0, 0xf0, 0x1f, 0x00, 0x05, 0x05, 0x02, 0x00, 0x5f, 0xc8, 0xf1,
    0xd2, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];
/// The empty WAV file the suite's reference server returns.
const WAV: &[u8] = &[
    0x52, 0x49, 0x46, 0x46, 0x26, 0x00, 0x00, 0x00, 0x57, 0x41, 0x56, 0x45, 0x66, 0x6d, 0x74, 0x20, 0x10, 0x00, 0x00,
    0x00, 0x01, 0x00, 0x01, 0x00, 0x40, 0x1f, 0x00, 0x00, 0x00, 0x7d, 0x00, 0x00, 0x02, 0x00, 0x10, 0x00, 0x64, 0x61,
    0x74, 0x61, 0x02, 0x00, 0x00, 0x00,
];

/// (name, description, JSON Schema of the arguments) of every reference tool.
fn tools() -> Vec<(&'static str, &'static str, Value)> {
    let none = json!({"type": "object", "properties": {}});
    let one = |name: &str, what: &str| json!({"type": "object", "properties": {name: {"type": "string", "description": what}}, "required": [name]});
    vec![
        ("test_simple_text", "Returns a simple text answer.", none.clone()),
        ("test_image_content", "Returns an image.", none.clone()),
        ("test_audio_content", "Returns a sound.", none.clone()),
        ("test_embedded_resource", "Returns an embedded resource.", none.clone()),
        ("test_multiple_content_types", "Returns text, an image and an embedded resource.", none.clone()),
        ("test_error_handling", "Always fails, with an error the client can read.", none.clone()),
        ("test_tool_with_logging", "Writes three log lines while it runs.", none.clone()),
        ("test_tool_with_progress", "Reports progress while it runs.", none.clone()),
        ("test_sampling", "Asks the client's model to complete a prompt.", one("prompt", "The prompt for the model")),
        ("test_elicitation", "Asks the user for their name and email.", one("message", "What to show the user")),
        ("test_elicitation_sep1034_defaults", "Asks the user a form whose fields have defaults.", none.clone()),
        ("test_elicitation_sep1330_enums", "Asks the user a form of every kind of enum.", none.clone()),
        (
            "json_schema_2020_12_tool",
            "Takes arguments described with JSON Schema 2020-12 keywords.",
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "$defs": {"address": {"$anchor": "addressDef", "type": "object", "properties": {
                    "street": {"type": "string"}, "city": {"type": "string"}
                }}},
                "properties": {
                    "name": {"type": "string"},
                    "address": {"$ref": "#/$defs/address"},
                    "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                    "phone": {"type": "string"},
                    "email": {"type": "string"}
                },
                "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
                "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
                "then": {"required": ["phone"]},
                "else": {"required": ["email"]},
                "additionalProperties": false
            }),
        ),
        ("test_missing_capability", "Needs the client's sampling.", none.clone()),
        ("test_streaming_elicitation", "Asks the user for a confirmation.", none.clone()),
        ("test_logging_tool", "Writes a log line.", none.clone()),
        ("test_trigger_tool_change", "Says the tool list changed.", none.clone()),
        ("test_trigger_prompt_change", "Says the prompt list changed.", none.clone()),
        ("test_input_required_result_elicitation", "Asks the user's name.", none.clone()),
        ("test_input_required_result_sampling", "Asks the client's model a question.", none.clone()),
        ("test_input_required_result_list_roots", "Asks the client's roots.", none.clone()),
        ("test_input_required_result_request_state", "Asks for a confirmation, across rounds.", none.clone()),
        ("test_input_required_result_multiple_inputs", "Asks three questions at once.", none.clone()),
        ("test_input_required_result_multi_round", "Asks two questions, one round each.", none.clone()),
        ("test_input_required_result_tampered_state", "Asks for a confirmation, across rounds.", none.clone()),
        ("test_input_required_result_capabilities", "Asks what the client declared it can answer.", none),
    ]
}

struct Reference;

impl Guest for Component {
    type Instance = Reference;
}

fn sleep_ms(ms: u64) {
    wasi::clocks::monotonic_clock::subscribe_duration(ms * 1_000_000).block();
}

fn text(s: impl Into<String>) -> ToolOutput {
    ToolOutput { text: s.into(), hits: Vec::new(), route: None, extra: None, content: Vec::new() }
}

fn with(s: &str, content: Vec<ContentBlock>) -> ToolOutput {
    ToolOutput { content, ..text(s) }
}

fn image() -> ContentBlock {
    ContentBlock::Image(Media { data: PNG.to_vec(), mime_type: "image/png".into() })
}

fn contents(uri: &str, mime: &str, body: &str) -> Contents {
    Contents { uri: uri.into(), mime_type: Some(mime.into()), body: Body::Text(body.into()) }
}

/// An elicitation of one required string field.
fn ask_string(key: &str, message: &str, field: &str) -> Result<Value, AskError> {
    let params = json!({
        "message": message,
        "requestedSchema": {"type": "object", "properties": {field: {"type": "string"}}, "required": [field]}
    });
    ask(key, RequestKind::Elicitation, params)
}

fn ask(key: &str, kind: RequestKind, params: Value) -> Result<Value, AskError> {
    let answer = client::ask(key, kind, &params.to_string())?;
    serde_json::from_str(&answer).map_err(|e| AskError::Failed(format!("the answer is not JSON: {e}")))
}

/// A sampling request of one user message.
fn sample(key: &str, prompt: &str, max_tokens: u32) -> Result<Value, AskError> {
    let params = json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
        "maxTokens": max_tokens
    });
    ask(key, RequestKind::Sampling, params)
}

/// What a tool does with an unanswered question: a pending one ends the round (the host asks
/// the client); any other is the tool's error.
fn failed(e: AskError) -> ToolError {
    match e {
        AskError::Pending => ToolError::Internal("waiting for the client's answers".into()),
        AskError::Unsupported(m) => ToolError::Denied(m),
        AskError::Failed(m) => ToolError::Upstream(m),
    }
}

fn sampled_text(answer: &Value) -> String {
    answer["content"]["text"].as_str().unwrap_or_default().to_string()
}

fn elicited(answer: &Value) -> String {
    format!(
        "action={}, content={}",
        answer["action"].as_str().unwrap_or("?"),
        answer.get("content").unwrap_or(&json!({}))
    )
}

/// Collects the answers of questions asked together: every question is asked before the
/// round ends, so the client answers them all at once.
fn all(answers: Vec<Result<Value, AskError>>) -> Result<Vec<Value>, ToolError> {
    let mut out = Vec::new();
    let mut pending = false;
    for a in answers {
        match a {
            Ok(v) => out.push(v),
            Err(AskError::Pending) => pending = true,
            Err(e) => return Err(failed(e)),
        }
    }
    if pending {
        return Err(failed(AskError::Pending));
    }
    Ok(out)
}

impl Reference {
    fn run(&self, tool: &str, args: &Value) -> Result<ToolOutput, ToolError> {
        let arg = |name: &str| args.get(name).and_then(Value::as_str).unwrap_or_default().to_string();
        match tool {
            "test_simple_text" => Ok(text("This is a simple text response for testing.")),
            "test_image_content" => Ok(with("An image follows.", vec![image()])),
            "test_audio_content" => Ok(with(
                "A sound follows.",
                vec![ContentBlock::Audio(Media { data: WAV.to_vec(), mime_type: "audio/wav".into() })],
            )),
            "test_embedded_resource" => Ok(with(
                "An embedded resource follows.",
                vec![ContentBlock::Embedded(contents(
                    "test://embedded-resource",
                    "text/plain",
                    "This is an embedded resource content.",
                ))],
            )),
            "test_multiple_content_types" => Ok(with(
                "Multiple content types test:",
                vec![
                    image(),
                    ContentBlock::Embedded(contents(
                        "test://mixed-content-resource",
                        "application/json",
                        r#"{"test":"data","value":123}"#,
                    )),
                ],
            )),
            "test_error_handling" => {
                Err(ToolError::Internal("This tool intentionally returns an error for testing".into()))
            }
            "test_tool_with_logging" | "test_logging_tool" => {
                for line in ["Tool execution started", "Tool processing data", "Tool execution completed"] {
                    eprintln!("{line}");
                }
                Ok(text("Tool with logging executed successfully"))
            }
            "test_tool_with_progress" => {
                // Further apart than the host's pace for progress notifications (4 a second).
                for done in [0, 50, 100] {
                    quarry::retrieval::progress::report("reference work", done, 100, "steps");
                    sleep_ms(300);
                }
                Ok(text("Progress reported"))
            }
            "test_sampling" => {
                let answer = sample("prompt", &arg("prompt"), 100).map_err(failed)?;
                Ok(text(format!("LLM response: {}", sampled_text(&answer))))
            }
            "test_elicitation" => {
                let params = json!({
                    "message": arg("message"),
                    "requestedSchema": {
                        "type": "object",
                        "properties": {
                            "username": {"type": "string", "description": "User's response"},
                            "email": {"type": "string", "description": "User's email address"}
                        },
                        "required": ["username", "email"]
                    }
                });
                let answer = ask("user", RequestKind::Elicitation, params).map_err(failed)?;
                Ok(text(format!("User response: {}", elicited(&answer))))
            }
            "test_elicitation_sep1034_defaults" => {
                let params = json!({
                    "message": "Please review and update the form fields with defaults",
                    "requestedSchema": {"type": "object", "required": [], "properties": {
                        "name": {"type": "string", "description": "User name", "default": "John Doe"},
                        "age": {"type": "integer", "description": "User age", "default": 30},
                        "score": {"type": "number", "description": "User score", "default": 95.5},
                        "status": {"type": "string", "description": "User status",
                                   "enum": ["active", "inactive", "pending"], "default": "active"},
                        "verified": {"type": "boolean", "description": "Verification status", "default": true}
                    }}
                });
                let answer = ask("form", RequestKind::Elicitation, params).map_err(failed)?;
                Ok(text(format!("Elicitation completed: {}", elicited(&answer))))
            }
            "test_elicitation_sep1330_enums" => {
                let titled = |kind: &str| {
                    json!([
                        {"const": "value1", "title": format!("First {kind}")},
                        {"const": "value2", "title": format!("Second {kind}")},
                        {"const": "value3", "title": format!("Third {kind}")}
                    ])
                };
                let params = json!({
                    "message": "Please select options from the enum fields",
                    "requestedSchema": {"type": "object", "required": [], "properties": {
                        "untitledSingle": {"type": "string", "description": "Select one option",
                                           "enum": ["option1", "option2", "option3"]},
                        "titledSingle": {"type": "string", "description": "Select one option with titles",
                                         "oneOf": titled("Option")},
                        "legacyEnum": {"type": "string", "description": "Select one option (legacy)",
                                       "enum": ["opt1", "opt2", "opt3"],
                                       "enumNames": ["Option One", "Option Two", "Option Three"]},
                        "untitledMulti": {"type": "array", "description": "Select multiple options",
                                          "minItems": 1, "maxItems": 3,
                                          "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                        "titledMulti": {"type": "array", "description": "Select multiple options with titles",
                                        "minItems": 1, "maxItems": 3, "items": {"anyOf": titled("Choice")}}
                    }}
                });
                let answer = ask("form", RequestKind::Elicitation, params).map_err(failed)?;
                Ok(text(format!("Elicitation completed: {}", elicited(&answer))))
            }
            "json_schema_2020_12_tool" => Ok(text("Schema tool called")),
            "test_missing_capability" => {
                let answer = sample("needed", "Say hello", 20).map_err(failed)?;
                Ok(text(format!("LLM response: {}", sampled_text(&answer))))
            }
            "test_streaming_elicitation" => {
                let answer = ask_string("confirm", "Please confirm", "ok").map_err(failed)?;
                Ok(text(format!("Confirmed: {}", elicited(&answer))))
            }
            "test_trigger_tool_change" => {
                client::changed(ListKind::Tools);
                Ok(text("The tool list changed."))
            }
            "test_trigger_prompt_change" => {
                client::changed(ListKind::Prompts);
                Ok(text("The prompt list changed."))
            }
            "test_input_required_result_elicitation" => {
                let answer = ask_string("user_name", "What is your name?", "name").map_err(failed)?;
                Ok(text(format!("Hello, {}!", answer["content"]["name"].as_str().unwrap_or("stranger"))))
            }
            "test_input_required_result_sampling" => {
                let answer = sample("capital_question", "What is the capital of France?", 100).map_err(failed)?;
                Ok(text(format!("The model says: {}", sampled_text(&answer))))
            }
            "test_input_required_result_list_roots" => {
                let answer = ask("client_roots", RequestKind::Roots, json!({})).map_err(failed)?;
                let roots: Vec<&str> = answer["roots"]
                    .as_array()
                    .map(|r| r.iter().filter_map(|x| x["uri"].as_str()).collect())
                    .unwrap_or_default();
                Ok(text(format!("Roots: {}", roots.join(", "))))
            }
            "test_input_required_result_request_state" | "test_input_required_result_tampered_state" => {
                let params = json!({
                    "message": "Please confirm",
                    "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
                });
                let answer = ask("confirm", RequestKind::Elicitation, params).map_err(failed)?;
                Ok(text(format!("state-ok: confirmed {}", elicited(&answer))))
            }
            "test_input_required_result_multiple_inputs" => {
                let answers = all(vec![
                    ask_string("user_name", "What is your name?", "name"),
                    sample("greeting", "Generate a greeting", 50),
                    ask("client_roots", RequestKind::Roots, json!({})),
                ])?;
                Ok(text(format!(
                    "name={}, greeting={}, roots={}",
                    answers[0]["content"]["name"].as_str().unwrap_or("?"),
                    sampled_text(&answers[1]),
                    answers[2]["roots"].as_array().map_or(0, Vec::len)
                )))
            }
            "test_input_required_result_multi_round" => {
                let name = ask_string("step1", "Step 1: What is your name?", "name").map_err(failed)?;
                let color = ask_string("step2", "Step 2: What is your favorite color?", "color").map_err(failed)?;
                Ok(text(format!(
                    "{} likes {}",
                    name["content"]["name"].as_str().unwrap_or("?"),
                    color["content"]["color"].as_str().unwrap_or("?")
                )))
            }
            "test_input_required_result_capabilities" => {
                // Each question the client cannot answer is left out; the others are asked.
                let asked =
                    [sample("model_answer", "Say hello", 20), ask_string("user_answer", "Say hello", "greeting")];
                let usable: Vec<Result<Value, AskError>> =
                    asked.into_iter().filter(|a| !matches!(a, Err(AskError::Unsupported(_)))).collect();
                let n = all(usable)?.len();
                Ok(text(format!("{n} answers")))
            }
            _ => Err(ToolError::NotFound(format!("no tool {tool}"))),
        }
    }
}

fn prompt_specs() -> Vec<PromptSpec> {
    let arg =
        |name: &str, what: &str| PromptArgument { name: name.into(), description: Some(what.into()), required: true };
    vec![
        PromptSpec {
            name: "test_simple_prompt".into(),
            description: "A prompt without arguments.".into(),
            arguments: vec![],
        },
        PromptSpec {
            name: "test_prompt_with_arguments".into(),
            description: "A prompt with two arguments.".into(),
            arguments: vec![arg("arg1", "First test argument"), arg("arg2", "Second test argument")],
        },
        PromptSpec {
            name: "test_prompt_with_embedded_resource".into(),
            description: "A prompt that embeds a resource.".into(),
            arguments: vec![arg("resourceUri", "URI of the resource to embed")],
        },
        PromptSpec {
            name: "test_prompt_with_image".into(),
            description: "A prompt with an image.".into(),
            arguments: vec![],
        },
        PromptSpec {
            name: "test_input_required_result_prompt".into(),
            description: "A prompt that asks the user for context.".into(),
            arguments: vec![],
        },
    ]
}

fn user(content: ContentBlock) -> PromptMessage {
    PromptMessage { role: Role::User, content }
}

impl GuestInstance for Reference {
    fn open(_config: String) -> Result<Instance, ToolError> {
        Ok(Instance::new(Reference))
    }

    fn specs(&self) -> Vec<ToolSpec> {
        tools()
            .into_iter()
            .map(|(name, description, schema)| ToolSpec {
                name: name.into(),
                description: description.into(),
                args_schema: schema.to_string(),
            })
            .collect()
    }

    fn prepare(&self) -> Result<(), ToolError> {
        Ok(())
    }

    fn call(&self, tool: String, args: String) -> Result<ToolOutput, ToolError> {
        let args: Value = serde_json::from_str(&args).unwrap_or(json!({}));
        self.run(&tool, &args)
    }

    fn catalog(&self) -> Catalog {
        Catalog {
            lists_resources: true,
            templates: vec![ResourceTemplate {
                uri_template: "test://template/{id}/data".into(),
                name: "template".into(),
                description: Some("Data for an id.".into()),
                mime_type: Some("application/json".into()),
            }],
            prompts: prompt_specs(),
        }
    }

    fn resources(&self) -> Result<Vec<ResourceInfo>, ToolError> {
        let r = |uri: &str, name: &str, description: &str, mime: &str| ResourceInfo {
            uri: uri.into(),
            name: name.into(),
            title: None,
            description: Some(description.into()),
            mime_type: Some(mime.into()),
        };
        Ok(vec![
            r("test://static-text", "static-text", "A static text resource.", "text/plain"),
            r("test://static-binary", "static-binary", "A static binary resource.", "image/png"),
            r("test://watched-resource", "watched-resource", "A resource to subscribe to.", "text/plain"),
        ])
    }

    fn read(&self, uri: String) -> Result<Vec<Contents>, ToolError> {
        let one = |c: Contents| Ok(vec![c]);
        match uri.as_str() {
            "test://static-text" => {
                one(contents(&uri, "text/plain", "This is the content of the static text resource."))
            }
            "test://static-binary" => {
                one(Contents { uri: uri.clone(), mime_type: Some("image/png".into()), body: Body::Blob(PNG.to_vec()) })
            }
            "test://watched-resource" => one(contents(&uri, "text/plain", "Watched resource content.")),
            _ => {
                let id = uri.strip_prefix("test://template/").and_then(|r| r.strip_suffix("/data"));
                match id {
                    Some(id) if !id.is_empty() && !id.contains('/') => {
                        let data = json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
                        one(contents(&uri, "application/json", &data.to_string()))
                    }
                    _ => Err(ToolError::NotFound(format!("no resource at {uri}"))),
                }
            }
        }
    }

    fn get_prompt(&self, name: String, args: String) -> Result<Prompt, ToolError> {
        let args: Value = serde_json::from_str(&args).unwrap_or(json!({}));
        let arg = |n: &str| args.get(n).and_then(Value::as_str).unwrap_or_default().to_string();
        let messages = match name.as_str() {
            "test_simple_prompt" => vec![user(ContentBlock::Text("This is a simple prompt for testing.".into()))],
            "test_prompt_with_arguments" => vec![user(ContentBlock::Text(format!(
                "Prompt with arguments: arg1='{}', arg2='{}'",
                arg("arg1"),
                arg("arg2")
            )))],
            "test_prompt_with_embedded_resource" => vec![
                user(ContentBlock::Embedded(contents(
                    &arg("resourceUri"),
                    "text/plain",
                    "Embedded resource content for testing.",
                ))),
                user(ContentBlock::Text("Please process the embedded resource above.".into())),
            ],
            "test_prompt_with_image" => {
                vec![user(image()), user(ContentBlock::Text("Please analyze the image above.".into()))]
            }
            "test_input_required_result_prompt" => {
                let answer =
                    ask_string("user_context", "What context should the prompt use?", "context").map_err(failed)?;
                let context = answer["content"]["context"].as_str().unwrap_or_default();
                vec![user(ContentBlock::Text(format!("Answer with this context in mind: {context}")))]
            }
            _ => return Err(ToolError::NotFound(format!("no prompt {name}"))),
        };
        Ok(Prompt { description: None, messages })
    }

    fn complete(
        &self,
        target: CompletionTarget,
        argument: String,
        value: String,
        _context: String,
    ) -> Result<Completion, ToolError> {
        let words: &[&str] = match (&target, argument.as_str()) {
            (CompletionTarget::Prompt(p), "arg1" | "arg2") if p == "test_prompt_with_arguments" => {
                &["paris", "park", "party", "test", "testing"]
            }
            (CompletionTarget::ResourceTemplate(_), "id") => &["1", "123", "42"],
            _ => &[],
        };
        let values: Vec<String> =
            words.iter().filter(|w| w.starts_with(value.as_str())).map(|w| w.to_string()).collect();
        Ok(Completion { total: Some(values.len() as u32), values, has_more: false })
    }
}

export!(Component);
