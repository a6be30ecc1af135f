//! Cosign key-based signatures, in cosign's `.sig` tag scheme: the signatures of the manifest
//! `sha256:HEX` are the layers of the manifest tagged `sha256-HEX.sig` in the same repository,
//! each a simple-signing payload (`application/vnd.dev.cosign.simplesigning.v1+json`, naming
//! the signed digest in `critical.image.docker-manifest-digest`) whose ECDSA P-256 / SHA-256
//! signature (ASN.1 DER, base64) is the layer's `dev.cosignproject.cosign/signature`
//! annotation. Keys are PEM: public keys as `cosign generate-key-pair` writes `cosign.pub`,
//! private keys as PKCS#8 (`openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`).
//!
//! Verified with ring, the host's TLS provider, rather than sigstore-rs, whose crypto stack
//! brings aws-lc-rs or native-tls. As `cosign verify --key KEY --insecure-ignore-tlog` does, only
//! the key is checked: no transparency log is consulted (none is reachable from a closed network).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use futures::StreamExt as _;
use oci_client::manifest::{OciDescriptor, OciImageManifest, OciManifest};
use ring::signature::{ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, UnparsedPublicKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{MAX_MANIFEST_BYTES, OciError, OciRef, auth_for, client_for};

/// The media type of a signature layer.
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation holding a layer's signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The largest signature payload read; cosign's are a few hundred bytes.
const MAX_PAYLOAD_BYTES: u64 = 64 << 10;
/// The most signatures looked at for one digest.
const MAX_SIGNATURES: usize = 32;

/// The DER prefix of an ECDSA P-256 SubjectPublicKeyInfo with an uncompressed point: SEQUENCE,
/// AlgorithmIdentifier(id-ecPublicKey, prime256v1), BIT STRING of 66 bytes (0 unused bits).
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce,
    0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// A public key signatures are checked with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    /// The uncompressed point (65 bytes).
    point: Vec<u8>,
    /// Where it was read from.
    path: PathBuf,
    /// `sha256:` of its SubjectPublicKeyInfo, the first 16 hex digits.
    fingerprint: String,
}

impl PublicKey {
    /// Reads a PEM public key (`-----BEGIN PUBLIC KEY-----`, ECDSA P-256, as cosign's
    /// `cosign.pub`).
    pub fn load(path: &Path) -> Result<PublicKey, String> {
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("cannot read the public key {}: {e}", path.display()))?;
        let der = pem_block(&text, "PUBLIC KEY").ok_or_else(|| {
            format!(
                "{} is not a PEM public key (-----BEGIN PUBLIC KEY-----, as cosign generate-key-pair writes cosign.pub)",
                path.display()
            )
        })?;
        if der.len() != P256_SPKI_PREFIX.len() + 65 || der[..P256_SPKI_PREFIX.len()] != P256_SPKI_PREFIX {
            return Err(format!(
                "{} is not an ECDSA P-256 public key, the kind cosign makes; other key types are not supported",
                path.display()
            ));
        }
        Ok(PublicKey {
            point: der[P256_SPKI_PREFIX.len()..].to_vec(),
            path: path.to_path_buf(),
            fingerprint: fingerprint(&der),
        })
    }

    /// `sha256:` and the first 16 hex digits of the key's SubjectPublicKeyInfo.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The key file and its fingerprint, for messages.
    pub fn describe(&self) -> String {
        format!("the key {} ({})", self.path.display(), self.fingerprint)
    }

    fn verifies(&self, payload: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &self.point).verify(payload, signature).is_ok()
    }
}

fn fingerprint(spki: &[u8]) -> String {
    format!("sha256:{}", &hex::encode(Sha256::digest(spki))[..16])
}

/// The DER inside the first PEM block labelled `label`.
fn pem_block(text: &str, label: &str) -> Option<Vec<u8>> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let body = text.split_once(&begin)?.1.split_once(&end)?.0;
    let b64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

/// A private key signatures are made with.
pub struct SigningKey {
    pair: EcdsaKeyPair,
}

impl SigningKey {
    /// Reads a PEM PKCS#8 ECDSA P-256 private key (`-----BEGIN PRIVATE KEY-----`).
    pub fn load(path: &Path) -> Result<SigningKey, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the private key {}: {e}", path.display()))?;
        let make = "make one with `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out cosign.key` and its public key with `openssl pkey -in cosign.key -pubout -out cosign.pub` (`cosign import-key-pair --key cosign.key` gives cosign the same key)";
        if text.contains("ENCRYPTED SIGSTORE PRIVATE KEY") || text.contains("ENCRYPTED COSIGN PRIVATE KEY") {
            return Err(format!(
                "{} is cosign's encrypted key format, which quarry does not read; sign with a PKCS#8 key instead: {make}",
                path.display()
            ));
        }
        let der = pem_block(&text, "PRIVATE KEY").ok_or_else(|| {
            format!("{} is not a PEM PKCS#8 private key (-----BEGIN PRIVATE KEY-----); {make}", path.display())
        })?;
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &der, &ring::rand::SystemRandom::new())
            .map_err(|e| format!("{} is not an ECDSA P-256 private key ({e}); {make}", path.display()))?;
        Ok(SigningKey { pair })
    }

    /// `sha256:` and the first 16 hex digits of the public key's SubjectPublicKeyInfo.
    pub fn fingerprint(&self) -> String {
        use ring::signature::KeyPair as _;
        let mut spki = P256_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(self.pair.public_key().as_ref());
        fingerprint(&spki)
    }
}

/// The tag of the signatures of `digest`: `sha256-HEX.sig`.
pub fn signature_tag(digest: &str) -> String {
    format!("{}.sig", digest.replacen(':', "-", 1))
}

/// Cosign's simple-signing payload.
#[derive(Serialize, Deserialize)]
struct Payload {
    critical: Critical,
    optional: Option<BTreeMap<String, serde_json::Value>>,
}

#[derive(Serialize, Deserialize)]
struct Critical {
    identity: Identity,
    image: Image,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Serialize, Deserialize)]
struct Identity {
    #[serde(rename = "docker-reference")]
    docker_reference: String,
}

#[derive(Serialize, Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    docker_manifest_digest: String,
}

const PAYLOAD_TYPE: &str = "cosign container image signature";

/// The payload that signs `digest` of `r`'s repository, as cosign writes it.
pub fn payload(r: &OciRef, digest: &str) -> Vec<u8> {
    let p = Payload {
        critical: Critical {
            identity: Identity { docker_reference: r.repository() },
            image: Image { docker_manifest_digest: digest.to_string() },
            kind: PAYLOAD_TYPE.to_string(),
        },
        optional: None,
    };
    serde_json::to_vec(&p).unwrap_or_default()
}

/// Checks that `key` signed the manifest `digest` of `r`'s repository: one of the layers at
/// its signature tag is a payload naming `digest` with a valid signature by `key`. Refuses an
/// unsigned digest and one whose signatures are all by other keys, or bad, naming the key and
/// the digest.
pub async fn verify(r: &OciRef, digest: &str, key: &PublicKey) -> Result<(), OciError> {
    let refused = |message: String| OciError::Refused { reference: r.to_string(), message };
    if !crate::reference::is_sha256_digest(digest) {
        return Err(refused(format!(
            "{digest:?} is not a digest (sha256:<64 hex digits>); fix quarry.lock or the reference"
        )));
    }
    let client = client_for(r.registry());
    let auth = auth_for(r.registry()).await?;
    let tag = signature_tag(digest);
    let at = r.at_tag(&tag);
    let accepted = [oci_client::manifest::OCI_IMAGE_MEDIA_TYPE, oci_client::manifest::IMAGE_MANIFEST_MEDIA_TYPE];
    let answer = tokio::time::timeout(crate::REQUEST_TIMEOUT, client.pull_manifest_raw(&at, &auth, &accepted)).await;
    let bytes = match answer {
        Ok(Ok((bytes, _))) => bytes,
        Ok(Err(e)) if is_not_found(&e) => {
            return Err(refused(format!(
                "{digest} is not signed (the registry has no {tag}), and the config wants it signed by {}; sign it (`quarry push --sign KEY`, or `cosign sign --key`) or pin a signed digest",
                key.describe()
            )));
        }
        Ok(Err(e)) => return Err(crate::pull::registry(r, &e)),
        Err(_) => return Err(crate::pull::timeout(r)),
    };
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(refused(format!(
            "the signature manifest {tag} is {} bytes, over {MAX_MANIFEST_BYTES}",
            bytes.len()
        )));
    }
    let manifest: OciImageManifest = serde_json::from_slice(&bytes).map_err(|e| {
        refused(format!("{tag} is not an OCI image manifest ({e}); {digest} is not signed by {}", key.describe()))
    })?;
    let mut seen = Vec::new();
    for layer in manifest.layers.iter().filter(|l| l.media_type == SIMPLE_SIGNING_MEDIA_TYPE).take(MAX_SIGNATURES) {
        match check_layer(&client, &at, layer, digest, key).await {
            Ok(()) => return Ok(()),
            Err(why) => seen.push(why),
        }
    }
    let found = if seen.is_empty() {
        "holds no cosign signature".to_string()
    } else {
        format!("holds {} signature(s), none valid: {}", seen.len(), seen.join("; "))
    };
    Err(refused(format!("{digest} is not signed by {}: {tag} {found}", key.describe())))
}

/// Why the signature layer `layer` does not sign `digest` with `key`, if it does not.
async fn check_layer(
    client: &oci_client::Client,
    at: &oci_client::Reference,
    layer: &OciDescriptor,
    digest: &str,
    key: &PublicKey,
) -> Result<(), String> {
    let signature = layer
        .annotations
        .as_ref()
        .and_then(|a| a.get(SIGNATURE_ANNOTATION))
        .ok_or("a layer without a signature annotation")?;
    let signature = base64::engine::general_purpose::STANDARD
        .decode(signature.trim())
        .map_err(|_| "a signature that is not base64")?;
    if u64::try_from(layer.size).unwrap_or(u64::MAX) > MAX_PAYLOAD_BYTES {
        return Err(format!("a payload of {} bytes, over {MAX_PAYLOAD_BYTES}", layer.size));
    }
    let payload = small_blob(client, at, layer).await?;
    if !key.verifies(&payload, &signature) {
        return Err("a signature by another key, or of other bytes".to_string());
    }
    let p: Payload = serde_json::from_slice(&payload).map_err(|e| format!("a payload that does not parse ({e})"))?;
    if p.critical.kind != PAYLOAD_TYPE {
        return Err(format!("a payload of type {:?}", p.critical.kind));
    }
    if p.critical.image.docker_manifest_digest != digest {
        return Err(format!("a valid signature of another digest, {}", p.critical.image.docker_manifest_digest));
    }
    Ok(())
}

/// The blob `layer` (at most [`MAX_PAYLOAD_BYTES`]), checked against its digest.
async fn small_blob(
    client: &oci_client::Client,
    at: &oci_client::Reference,
    layer: &OciDescriptor,
) -> Result<Vec<u8>, String> {
    let fetch = async {
        let mut stream = client.pull_blob_stream(at, layer).await.map_err(|e| format!("its payload: {e}"))?;
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| format!("its payload: {e}"))?;
            bytes.extend_from_slice(&chunk);
            if bytes.len() as u64 > MAX_PAYLOAD_BYTES {
                return Err(format!("a payload over {MAX_PAYLOAD_BYTES} bytes"));
            }
        }
        Ok(bytes)
    };
    let bytes = tokio::time::timeout(crate::CONNECT_TIMEOUT * 6, fetch)
        .await
        .map_err(|_| "its payload did not arrive in time".to_string())??;
    if format!("sha256:{}", hex::encode(Sha256::digest(&bytes))) != layer.digest {
        return Err("a payload whose bytes are not its digest".to_string());
    }
    Ok(bytes)
}

/// Whether the registry said it has no such manifest (there is no signature), as opposed to
/// failing to answer.
fn is_not_found(e: &oci_client::errors::OciDistributionError) -> bool {
    use oci_client::errors::{OciDistributionError as E, OciErrorCode};
    match e {
        E::ImageManifestNotFoundError(_) => true,
        E::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| e.code == OciErrorCode::ManifestUnknown),
        E::ServerError { code, .. } => *code == 404,
        _ => false,
    }
}

/// Signs the manifest `digest` of `r`'s repository with `key`, as `cosign sign --key` does: the
/// signature is added to those already at its signature tag. Returns the tag.
pub async fn sign(r: &OciRef, digest: &str, key: &SigningKey) -> Result<String, OciError> {
    let failed = |e: oci_client::errors::OciDistributionError| OciError::Registry {
        registry: r.registry().to_string(),
        message: e.to_string(),
    };
    if !crate::reference::is_sha256_digest(digest) {
        return Err(OciError::Reference(format!("{digest:?} is not a digest (sha256:<64 hex digits>)")));
    }
    let client = client_for(r.registry());
    let auth = auth_for(r.registry()).await?;
    let tag = signature_tag(digest);
    let at = r.at_tag(&tag);
    let payload = payload(r, digest);
    let signature = key
        .pair
        .sign(&ring::rand::SystemRandom::new(), &payload)
        .map_err(|e| OciError::Reference(format!("signing failed: {e}")))?;
    let layer = OciDescriptor {
        media_type: SIMPLE_SIGNING_MEDIA_TYPE.to_string(),
        digest: format!("sha256:{}", hex::encode(Sha256::digest(&payload))),
        size: payload.len() as i64,
        urls: None,
        artifact_type: None,
        annotations: Some(BTreeMap::from([(
            SIGNATURE_ANNOTATION.to_string(),
            base64::engine::general_purpose::STANDARD.encode(signature.as_ref()),
        )])),
    };
    // Signatures already there stay (another signer's, or this key's of before).
    let accepted = [oci_client::manifest::OCI_IMAGE_MEDIA_TYPE];
    // A signature manifest that cannot be read is not replaced: that would drop its signatures.
    let answer = tokio::time::timeout(crate::REQUEST_TIMEOUT, client.pull_manifest_raw(&at, &auth, &accepted)).await;
    let mut layers: Vec<OciDescriptor> = match answer {
        Ok(Ok((bytes, _))) => serde_json::from_slice::<OciImageManifest>(&bytes)
            .map_err(|e| OciError::Refused {
                reference: r.to_string(),
                message: format!("{tag} is there but is not an OCI image manifest ({e}); nothing was signed"),
            })?
            .layers
            .into_iter()
            .filter(|l| l.media_type == SIMPLE_SIGNING_MEDIA_TYPE)
            .collect(),
        Ok(Err(e)) if is_not_found(&e) => Vec::new(),
        Ok(Err(e)) => return Err(failed(e)),
        Err(_) => return Err(crate::pull::timeout(r)),
    };
    layers.push(layer);
    let diff_ids: Vec<&str> = layers.iter().map(|l| l.digest.as_str()).collect();
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "", "created": "0001-01-01T00:00:00Z", "history": [{"created": "0001-01-01T00:00:00Z"}],
        "os": "", "rootfs": {"type": "layers", "diff_ids": diff_ids}, "config": {}
    }))
    .unwrap_or_default();
    let config_desc = OciDescriptor {
        media_type: oci_client::manifest::IMAGE_CONFIG_MEDIA_TYPE.to_string(),
        digest: format!("sha256:{}", hex::encode(Sha256::digest(&config))),
        size: config.len() as i64,
        urls: None,
        artifact_type: None,
        annotations: None,
    };
    let push = async {
        client.auth(&at, &auth, oci_client::RegistryOperation::Push).await?;
        client.push_blob(&at, payload.clone(), &layers[layers.len() - 1].digest).await?;
        client.push_blob(&at, config.clone(), &config_desc.digest).await?;
        let manifest = OciImageManifest {
            schema_version: 2,
            media_type: Some(oci_client::manifest::OCI_IMAGE_MEDIA_TYPE.to_string()),
            config: config_desc.clone(),
            layers: layers.clone(),
            subject: None,
            artifact_type: None,
            annotations: None,
        };
        client.push_manifest(&at, &OciManifest::Image(manifest)).await
    };
    match tokio::time::timeout(crate::REQUEST_TIMEOUT, push).await {
        Ok(res) => res.map_err(failed)?,
        Err(_) => return Err(crate::pull::timeout(r)),
    };
    Ok(tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_with_its_key_only_and_only_over_its_payload() {
        let dir = tempfile::tempdir().unwrap();
        let rng = ring::rand::SystemRandom::new();
        let pem = |label: &str, der: &[u8]| {
            format!(
                "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
                base64::engine::general_purpose::STANDARD.encode(der)
            )
        };
        let mut keys = Vec::new();
        for name in ["a", "b"] {
            let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
            std::fs::write(dir.path().join(format!("{name}.key")), pem("PRIVATE KEY", pkcs8.as_ref())).unwrap();
            let signing = SigningKey::load(&dir.path().join(format!("{name}.key"))).unwrap();
            use ring::signature::KeyPair as _;
            let mut spki = P256_SPKI_PREFIX.to_vec();
            spki.extend_from_slice(signing.pair.public_key().as_ref());
            std::fs::write(dir.path().join(format!("{name}.pub")), pem("PUBLIC KEY", &spki)).unwrap();
            let public = PublicKey::load(&dir.path().join(format!("{name}.pub"))).unwrap();
            assert_eq!(public.fingerprint(), signing.fingerprint());
            keys.push((signing, public));
        }
        let r = OciRef::parse("oci://127.0.0.1:5000/tools/echo:v1").unwrap();
        let digest = format!("sha256:{}", "ab".repeat(32));
        let payload = payload(&r, &digest);
        let text = String::from_utf8(payload.clone()).unwrap();
        assert!(text.contains(&format!("\"docker-manifest-digest\":\"{digest}\"")), "{text}");
        assert!(text.contains("\"docker-reference\":\"127.0.0.1:5000/tools/echo\""), "{text}");
        let sig = keys[0].0.pair.sign(&rng, &payload).unwrap();
        assert!(keys[0].1.verifies(&payload, sig.as_ref()));
        assert!(!keys[1].1.verifies(&payload, sig.as_ref()));
        assert!(!keys[0].1.verifies(&payload[1..], sig.as_ref()));
        assert_eq!(signature_tag(&digest), format!("sha256-{}.sig", "ab".repeat(32)));

        // What is not a P-256 PEM key says what is wanted.
        std::fs::write(dir.path().join("junk.pub"), "hello").unwrap();
        let e = PublicKey::load(&dir.path().join("junk.pub")).unwrap_err();
        assert!(e.contains("BEGIN PUBLIC KEY"), "{e}");
        std::fs::write(
            dir.path().join("enc.key"),
            "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nAA==\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n",
        )
        .unwrap();
        let e = SigningKey::load(&dir.path().join("enc.key")).err().unwrap();
        assert!(e.contains("cosign's encrypted key format") && e.contains("openssl genpkey"), "{e}");
    }
}
