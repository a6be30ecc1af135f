//! What an instance offers, checked when it opens (and again when a call says it changed): its
//! tools as listed ([`ToolEntry`]), each tool's argument schema, and its catalog of resource
//! templates and prompts. A component's descriptions are bounded and its names checked here.

use std::sync::Arc;

use crate::bindings::ToolSpec;
use crate::bindings::quarry::retrieval::types::Catalog;
use crate::config::InstanceConfig;

use super::version::ComponentVersion;

/// The most tools one instance may offer.
pub const MAX_TOOLS: usize = 128;
/// The largest description plus argument schema of one tool.
pub const MAX_SPEC_BYTES: usize = 64 << 10;
/// A JSON object, as a tool's schema is.
pub type JsonObject = serde_json::Map<String, serde_json::Value>;

/// One tool as listed to users: `instance.tool`. Built once when its instance opens.
#[derive(Debug, Clone)]
pub struct ToolEntry {
    /// `instance.tool`, unique and stable.
    pub qualified: String,
    /// The instance name.
    pub instance: String,
    /// The tool's spec as the component gave it.
    pub spec: ToolSpec,
    /// Its arguments' JSON Schema, parsed once (shared with every listing of it).
    pub schema: Arc<JsonObject>,
    /// SHA-256 (hex) of the component version serving it.
    pub component_hash: String,
    /// The version that component carries, if any.
    pub component_version: Option<String>,
}

/// The listed tools of `specs`, checked: named `instance.tool`, or by the tool's own name for an
/// instance whose config says `bare_names = true`.
pub(super) fn entries(
    config: &InstanceConfig,
    version: &ComponentVersion,
    specs: Vec<ToolSpec>,
) -> Result<Vec<ToolEntry>, String> {
    let schemas = check_specs(&specs)?;
    let hash = hex::encode(version.hash);
    Ok(specs
        .into_iter()
        .zip(schemas)
        .map(|(spec, schema)| ToolEntry {
            qualified: config.listed_name(&spec.name),
            instance: config.name.clone(),
            spec,
            schema: Arc::new(schema),
            component_hash: hash.clone(),
            component_version: version.version.clone(),
        })
        .collect())
}

/// The most resource templates, and prompts, one instance may offer.
pub const MAX_CATALOG: usize = 128;

/// Checks an instance's catalog: names as tool names are, bounded counts, resource templates its
/// own (under `quarry://self/` or its `schemes`).
pub(super) fn check_catalog(catalog: &Catalog, schemes: &[String]) -> Result<(), String> {
    if catalog.templates.len() > MAX_CATALOG || catalog.prompts.len() > MAX_CATALOG {
        return Err(format!("it offers more than {MAX_CATALOG} resource templates or prompts"));
    }
    // Each described in at most what a tool's spec may take.
    let opt = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    let template_bytes = |t: &crate::bindings::quarry::retrieval::types::ResourceTemplate| {
        t.uri_template.len() + t.name.len() + opt(&t.description) + opt(&t.mime_type)
    };
    let prompt_bytes = |p: &crate::bindings::quarry::retrieval::types::PromptSpec| {
        p.name.len()
            + p.description.len()
            + p.arguments.iter().map(|a| a.name.len() + opt(&a.description)).sum::<usize>()
    };
    if catalog
        .templates
        .iter()
        .map(template_bytes)
        .chain(catalog.prompts.iter().map(prompt_bytes))
        .any(|n| n > MAX_SPEC_BYTES)
    {
        return Err(format!("a resource template or prompt takes more than {MAX_SPEC_BYTES} bytes to describe"));
    }
    let mut seen = std::collections::BTreeSet::new();
    for p in &catalog.prompts {
        let ok = !p.name.is_empty()
            && p.name.len() <= 64
            && p.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !ok {
            return Err(format!(
                "prompt name {} must use lowercase letters, digits and `_` (at most 64)",
                crate::support::text::quoted_prefix(&p.name, 64)
            ));
        }
        if !seen.insert(p.name.as_str()) {
            return Err(format!("prompt name {:?} appears twice", p.name));
        }
    }
    for t in &catalog.templates {
        // The namespace is the host's to give: a component names only its own resources.
        if !crate::registry::ask::owns(&t.uri_template, schemes) {
            return Err(format!(
                "resource template {} is not the component's own: a component names its resources under {} (the host lists them as quarry://INSTANCE/...), or in a scheme the operator gave its instance (`resource_schemes`), never another instance's",
                crate::support::text::quoted_prefix(&t.uri_template, 200),
                crate::registry::ask::SELF_PREFIX
            ));
        }
        crate::registry::uri_template::Template::parse(&t.uri_template)
            .map_err(|e| format!("resource template {:?}: {e}", crate::support::text::cut(&t.uri_template, 200)))?;
    }
    Ok(())
}

/// Checks what a component offers; returns each tool's schema, parsed once here.
fn check_specs(specs: &[ToolSpec]) -> Result<Vec<JsonObject>, String> {
    if specs.is_empty() {
        return Err("it offers no tools".into());
    }
    if specs.len() > MAX_TOOLS {
        return Err(format!("it offers {} tools, more than {MAX_TOOLS}", specs.len()));
    }
    if let Some(s) = specs.iter().find(|s| s.name.len() + s.description.len() + s.args_schema.len() > MAX_SPEC_BYTES) {
        return Err(format!(
            "tool {} takes {} bytes to describe, more than {MAX_SPEC_BYTES}",
            crate::support::text::quoted_prefix(&s.name, 64),
            s.name.len() + s.description.len() + s.args_schema.len()
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut schemas = Vec::with_capacity(specs.len());
    for s in specs {
        let ok =
            !s.name.is_empty() && s.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !ok || s.name.len() > 64 {
            return Err(format!(
                "tool name {} must use lowercase letters, digits and `_` (at most 64)",
                crate::support::text::quoted_prefix(&s.name, 64)
            ));
        }
        if !seen.insert(s.name.as_str()) {
            return Err(format!("tool name {:?} appears twice", s.name));
        }
        let schema: serde_json::Value = serde_json::from_str(&s.args_schema)
            .map_err(|e| format!("tool {:?}: args-schema is not JSON: {e}", s.name))?;
        match schema {
            serde_json::Value::Object(o) if o.get("type").and_then(|t| t.as_str()) == Some("object") => schemas.push(o),
            _ => {
                return Err(format!("tool {:?}: args-schema must be a JSON Schema with \"type\": \"object\"", s.name));
            }
        }
    }
    Ok(schemas)
}
