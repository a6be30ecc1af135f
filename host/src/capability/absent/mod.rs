//! What stands in for a capability the host was built without (a cargo feature turned off):
//! the same names, so that the capability list reads the same; a config that grants the
//! capability is refused at load and says how to get a host that has it. A component that
//! imports its interface fails to link.

use crate::support::values::KeyError;

/// The error a grant or section of a capability this host lacks gets.
pub fn missing(capability: &str, feature: &str) -> KeyError {
    KeyError::new(
        "",
        format!(
            "this quarry was built without the {capability} capability (cargo feature `{feature}`); build the host with its default features (`make host`) to use it"
        ),
    )
}

#[cfg(test)]
mod tests {
    /// Run by `make test` with `--no-default-features`: a config that needs a capability this
    /// host lacks is refused at load, naming the key and how to get a host that has it.
    #[test]
    fn a_config_that_needs_a_missing_capability_says_how_to_get_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("kb.wasm"), b"").unwrap();
        let path = &dir.path().join("quarry.toml");
        #[cfg(not(feature = "couchbase"))]
        {
            let text = "[couchbase.main]\nconnection_string = \"couchbase://127.0.0.1\"\n";
            let e = crate::Config::parse(path, text).unwrap_err().to_string();
            assert!(e.contains("couchbase.main") && e.contains("without the Couchbase capability"), "{e}");
            assert!(e.contains("make host"), "{e}");
        }
        #[cfg(not(feature = "bedrock"))]
        {
            let text = "[tools.kb]\ncomponent = \"kb.wasm\"\n[tools.kb.grants]\nbedrock = { region = \"us-east-1\" }\n";
            let e = crate::Config::parse(path, text).unwrap_err().to_string();
            assert!(e.contains("tools.kb.grants.bedrock") && e.contains("without the Bedrock capability"), "{e}");
        }
        #[cfg(not(feature = "nn"))]
        {
            let text = "[models.m]\ndir = \"models/m\"\n";
            let e = crate::Config::parse(path, text).unwrap_err().to_string();
            assert!(e.contains("models.m") && e.contains("without the wasi-nn capability"), "{e}");
        }
    }
}
