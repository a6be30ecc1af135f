//! `quarry push` and `quarry pull`: components to and from OCI registries (see [`crate::oci`]).

use std::path::{Path, PathBuf};

#[cfg(feature = "oci")]
use super::{EXIT_OK, EXIT_TOOL};
use super::{EXIT_USAGE, Outcome, fail};

/// `quarry push`'s flags.
#[derive(clap::Args, Debug)]
pub struct PushFlags {
    /// The component file.
    pub file: PathBuf,
    /// `oci://REGISTRY/REPOSITORY:TAG`.
    pub reference: String,
    /// Also sign the pushed digest with this ECDSA P-256 private key (PEM PKCS#8), as
    /// `cosign sign --key` does: hosts whose config names its public key (`signed_by`)
    /// then accept it.
    #[arg(long, value_name = "KEY")]
    pub sign: Option<PathBuf>,
}

/// `quarry push FILE REF [--sign KEY]`: publishes, signs, and prints the digest to pin.
#[cfg(feature = "oci")]
pub async fn push(flags: PushFlags) -> Outcome {
    let PushFlags { file, reference, sign } = flags;
    // The key is read before anything is pushed: a bad key publishes nothing.
    let key = sign
        .as_deref()
        .map(quarry_oci::SigningKey::load)
        .transpose()
        .map_err(|e| fail(EXIT_USAGE, format!("--sign: {e}")))?;
    let pushed = async {
        let r = quarry_oci::OciRef::parse(&reference)?;
        let digest = quarry_oci::push(&file, &r).await?;
        let signed = match &key {
            Some(k) => Some((quarry_oci::sign(&r, &digest, k).await?, k.fingerprint())),
            None => None,
        };
        Ok::<_, quarry_oci::OciError>((r, digest, signed))
    };
    let (r, digest, signed) = pushed.await.map_err(|e| fail(EXIT_TOOL, e))?;
    let pinned = format!("oci://{}@{digest}", r.repository());
    println!("pushed {} as {digest}", file.display());
    if let Some((tag, fingerprint)) = signed {
        println!("signed it with the key {fingerprint}: {}:{tag}", r.repository());
    }
    println!("pin it: component = \"{pinned}\"");
    Ok(EXIT_OK)
}

/// `quarry pull`: resolves every `oci://` tag of the config at `path` again, pins the digests
/// in `quarry.lock` and fetches what changed; says for each instance where it now stands.
#[cfg(feature = "oci")]
pub async fn pull(path: &Path) -> Outcome {
    let config = crate::config::Config::load(path).map_err(|e| fail(EXIT_USAGE, e))?;
    let fetched = crate::oci::fetch(&config, true).await.map_err(|e| fail(EXIT_TOOL, e))?;
    for f in &fetched {
        tracing::info!(target: "quarry::oci", instance = %f.instance, reference = %f.reference, digest = %f.digest, downloaded = f.downloaded, "component from its registry");
        let what = if f.moved { "now" } else { "still" };
        let signed = f.signed_by.as_ref().map(|k| format!(", signed by {k}")).unwrap_or_default();
        println!("{}: {} is {what} {}{signed}", f.instance, f.reference, f.digest);
    }
    if fetched.is_empty() {
        println!("{} names no oci:// component: nothing to pull", path.display());
    }
    Ok(EXIT_OK)
}

/// Without registry support, `push` says how to get it.
#[cfg(not(feature = "oci"))]
pub async fn push(_flags: PushFlags) -> Outcome {
    Err(without_oci())
}

/// Without registry support, `pull` checks the config, then says how to get it.
#[cfg(not(feature = "oci"))]
pub async fn pull(path: &Path) -> Outcome {
    crate::config::Config::load(path).map_err(|e| fail(EXIT_USAGE, e))?;
    Err(without_oci())
}

#[cfg(not(feature = "oci"))]
fn without_oci() -> super::Exit {
    fail(EXIT_USAGE, "this quarry was built without registry support (cargo feature `oci`)")
}
