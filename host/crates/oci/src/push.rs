//! `quarry push FILE REF`: a component published in the Wasm OCI artifact format.

use std::path::Path;

use oci_wasm::{WasmClient, WasmConfig};

use crate::pull::timed;
use crate::{OciError, OciRef, auth_for, client_for};

/// The OCI annotation of a manifest's version.
pub const VERSION_ANNOTATION: &str = "org.opencontainers.image.version";

/// Pushes the component `file` as `r` (which names a tag) and returns the manifest digest the
/// registry stored: what a config pins (`oci://…@DIGEST`). The manifest carries the component's
/// version as [`VERSION_ANNOTATION`] when the component has one.
pub async fn push(file: &Path, r: &OciRef) -> Result<String, OciError> {
    if r.tag().is_none() || r.digest().is_some() {
        return Err(OciError::Reference(format!("push to a tag (oci://REGISTRY/REPOSITORY:TAG), not {r}")));
    }
    let bytes = std::fs::read(file).map_err(|e| OciError::Cache(format!("{}: {e}", file.display())))?;
    // The component's own version (its `version` section) becomes the manifest's standard
    // annotation, which registries and `crane manifest` show.
    let annotations = quarry_support::metadata::version(&bytes)
        .map(|v| std::collections::BTreeMap::from([(VERSION_ANNOTATION.to_string(), v)]));
    let (config, layer) = WasmConfig::from_raw_component(bytes, None).map_err(|e| OciError::Refused {
        reference: r.to_string(),
        message: format!("{} is not a WebAssembly component: {e:#}", file.display()),
    })?;
    let client = WasmClient::new(client_for(r.registry()));
    let auth = auth_for(r.registry()).await?;
    match tokio::time::timeout(crate::REQUEST_TIMEOUT, client.push(r.reference(), &auth, layer, config, annotations))
        .await
    {
        Ok(res) => {
            res.map_err(|e| OciError::Registry { registry: r.registry().to_string(), message: format!("{e:#}") })?
        }
        Err(_) => return Err(crate::pull::timeout(r)),
    };
    timed(r, client.fetch_manifest_digest(r.reference(), &auth)).await
}
