//! Pulling a component by digest into the cache, checking every byte against what was pinned.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use futures::StreamExt as _;
use oci_client::manifest::OciImageManifest;
use oci_wasm::{WASM_LAYER_MEDIA_TYPE, WASM_MANIFEST_CONFIG_MEDIA_TYPE, WASM_MANIFEST_MEDIA_TYPE};
use sha2::{Digest, Sha256};

use crate::reference::is_sha256_digest;
use crate::{MAX_MANIFEST_BYTES, OciError, OciRef, REQUEST_TIMEOUT, auth_for, client_for};

/// A component the cache holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pulled {
    /// Its manifest digest (`sha256:…`).
    pub digest: String,
    /// The component file, in the cache.
    pub path: PathBuf,
    /// Whether it was fetched now (false: it was in the cache).
    pub fetched: bool,
}

/// The one layer of the Wasm component manifest `bytes` (whose digest is `digest`), checked:
/// an OCI image manifest whose config is a Wasm component's, with one layer of the Wasm layer
/// type, at most `max_bytes`, with a sha256 digest. The error says what is wrong.
pub fn component_layer(
    bytes: &[u8],
    digest: &str,
    max_bytes: u64,
) -> Result<oci_client::manifest::OciDescriptor, String> {
    let manifest: OciImageManifest =
        serde_json::from_slice(bytes).map_err(|e| format!("{digest} is not an OCI image manifest ({e})"))?;
    if manifest.config.media_type != WASM_MANIFEST_CONFIG_MEDIA_TYPE {
        return Err(format!(
            "{digest} is not a Wasm component: its config is {:?}, not {WASM_MANIFEST_CONFIG_MEDIA_TYPE} (push it with `quarry push`)",
            manifest.config.media_type
        ));
    }
    let [layer] = manifest.layers.as_slice() else {
        return Err(format!("{digest} has {} layers; a Wasm component has one", manifest.layers.len()));
    };
    if layer.media_type != WASM_LAYER_MEDIA_TYPE {
        return Err(format!("{digest}'s layer is {:?}, not {WASM_LAYER_MEDIA_TYPE}", layer.media_type));
    }
    let size = u64::try_from(layer.size).unwrap_or(u64::MAX);
    if size > max_bytes {
        return Err(format!(
            "{digest}'s component is {size} bytes, over the host's max_component_size ({max_bytes} bytes); nothing was downloaded"
        ));
    }
    if !is_sha256_digest(&layer.digest) {
        return Err(format!("{digest}'s layer digest {:?} is not sha256:<64 hex digits>", layer.digest));
    }
    Ok(layer.clone())
}

/// Pulls components into a cache directory, at most `max_bytes` each.
pub struct Puller {
    dir: PathBuf,
    max_bytes: u64,
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl Puller {
    /// Components in `cache_dir/oci/sha256/`, refused above `max_bytes`.
    pub fn new(cache_dir: &Path, max_bytes: u64) -> Puller {
        Puller { dir: cache_dir.join("oci/sha256"), max_bytes }
    }

    /// The cached file of the component whose manifest digest is `digest`.
    pub fn path_of(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{}.wasm", digest.trim_start_matches("sha256:")))
    }

    /// The digest `r`'s tag points to now (its own digest, when it pins one).
    pub async fn resolve(&self, r: &OciRef) -> Result<String, OciError> {
        if let Some(d) = r.digest() {
            return Ok(d.to_string());
        }
        let client = client_for(r.registry());
        let auth = auth_for(r.registry()).await?;
        let digest = timed(r, client.fetch_manifest_digest(r.reference(), &auth)).await?;
        if !is_sha256_digest(&digest) {
            return Err(refused(r, format!("the registry named the digest {digest:?}, not sha256:<64 hex digits>")));
        }
        Ok(digest)
    }

    /// The component of `r` at manifest digest `digest`: from the cache, else pulled, checked
    /// against the digest as it arrives, and cached. Nothing of a refused pull is kept.
    pub async fn pull(&self, r: &OciRef, digest: &str) -> Result<Pulled, OciError> {
        // A lock file's digest is checked as a registry's is: it becomes a file name.
        if !is_sha256_digest(digest) {
            return Err(refused(
                r,
                format!("{digest:?} is not a digest (sha256:<64 hex digits>); fix quarry.lock or the reference"),
            ));
        }
        let path = self.path_of(digest);
        if path.is_file() {
            return Ok(Pulled { digest: digest.to_string(), path, fetched: false });
        }
        let client = client_for(r.registry());
        let auth = auth_for(r.registry()).await?;
        let at = r.at(digest);
        let accepted = [WASM_MANIFEST_MEDIA_TYPE, "application/vnd.docker.distribution.manifest.v2+json"];
        let (bytes, _) = timed(r, client.pull_manifest_raw(&at, &auth, &accepted)).await?;
        if bytes.len() > MAX_MANIFEST_BYTES {
            return Err(refused(r, format!("its manifest is {} bytes, over {MAX_MANIFEST_BYTES}", bytes.len())));
        }
        let got = format!("sha256:{}", sha256_hex(&bytes));
        if got != digest {
            return Err(refused(
                r,
                format!(
                    "the registry served a manifest whose digest is {got}, not the pinned {digest}; nothing was kept"
                ),
            ));
        }
        let layer = &component_layer(&bytes, digest, self.max_bytes).map_err(|why| refused(r, why))?;
        let size = u64::try_from(layer.size).unwrap_or(u64::MAX);
        let want = &layer.digest[7..];

        std::fs::create_dir_all(&self.dir).map_err(|e| OciError::Cache(format!("{}: {e}", self.dir.display())))?;
        let mut file = tempfile::NamedTempFile::new_in(&self.dir)
            .map_err(|e| OciError::Cache(format!("{}: {e}", self.dir.display())))?;
        let mut hasher = Sha256::new();
        let mut received = 0u64;
        let download = async {
            let mut stream = client.pull_blob_stream(&at, layer).await.map_err(|e| registry(r, &e))?;
            while let Some(chunk) = stream.next().await {
                // oci-client checks the bytes against the layer's digest as they come, and fails the
                // stream when they do not match (or the connection breaks).
                let chunk = chunk.map_err(|e| {
                    refused(r, format!("{digest}'s layer did not arrive as its digest says ({e}); nothing was kept"))
                })?;
                received += chunk.len() as u64;
                // Whatever the registry said its size is, no more than the manifest's is kept.
                if received > size {
                    return Err(refused(
                        r,
                        format!("the registry sent more than the {size} bytes of {digest}'s layer"),
                    ));
                }
                hasher.update(&chunk);
                file.write_all(&chunk).map_err(|e| OciError::Cache(e.to_string()))?;
            }
            Ok(())
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, download).await {
            Ok(r) => r?,
            Err(_) => return Err(timeout(r)),
        }
        let got = hex::encode(hasher.finalize());
        if got != want || received != size {
            return Err(refused(
                r,
                format!(
                    "the registry served {received} bytes with digest sha256:{got} for {digest}'s layer, which the manifest says is {size} bytes with sha256:{want}; nothing was kept"
                ),
            ));
        }
        file.as_file().sync_all().map_err(|e| OciError::Cache(e.to_string()))?;
        file.persist(&path).map_err(|e| OciError::Cache(format!("{}: {e}", path.display())))?;
        tracing::info!(target: "quarry::oci", reference = %r, %digest, bytes = size, "component pulled");
        Ok(Pulled { digest: digest.to_string(), path, fetched: true })
    }
}

fn refused(r: &OciRef, message: String) -> OciError {
    OciError::Refused { reference: r.to_string(), message }
}

pub(crate) fn registry(r: &OciRef, e: &oci_client::errors::OciDistributionError) -> OciError {
    OciError::Registry { registry: r.registry().to_string(), message: e.to_string() }
}

pub(crate) fn timeout(r: &OciRef) -> OciError {
    OciError::Registry {
        registry: r.registry().to_string(),
        message: format!("no answer within {} s", REQUEST_TIMEOUT.as_secs()),
    }
}

/// `fut` within the request timeout, its error as the registry's.
pub(crate) async fn timed<T>(
    r: &OciRef,
    fut: impl std::future::Future<Output = Result<T, oci_client::errors::OciDistributionError>>,
) -> Result<T, OciError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, fut).await {
        Ok(res) => res.map_err(|e| registry(r, &e)),
        Err(_) => Err(timeout(r)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_digest_that_is_not_sha256_hex_never_becomes_a_path() {
        let cache = tempfile::tempdir().unwrap();
        // The file this digest would name, were it used as a path: "cached", it would be served.
        std::fs::create_dir_all(cache.path().join("oci/sha256")).unwrap();
        std::fs::write(cache.path().join(format!("{}.wasm", "a".repeat(58))), b"").unwrap();
        let puller = Puller::new(cache.path(), 1 << 20);
        let r = OciRef::parse("oci://127.0.0.1:1/t/x:v1").unwrap();
        let bad = format!("sha256:../../{}", "a".repeat(58));
        let e = puller.pull(&r, &bad).await.unwrap_err().to_string();
        assert!(e.contains("is not a digest"), "{e}");
    }
}
