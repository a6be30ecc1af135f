//! OCI references and manifests: any text is a reference or an error; any manifest bytes give
//! one checked layer (a Wasm layer, within the size limit, with a sha256 digest) or an error.
#![no_main]

use libfuzzer_sys::fuzz_target;

const DIGEST: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(r) = quarry_oci::OciRef::parse(text)
    {
        let _ = (r.registry(), r.digest(), r.tag(), r.repository(), r.to_string());
    }
    if let Ok(layer) = quarry_oci::component_layer(data, DIGEST, 64 << 20) {
        assert!(layer.size >= 0 && layer.size <= 64 << 20);
        assert!(layer.digest.starts_with("sha256:") && layer.digest.len() == 71);
    }
});
