//! What a component says of itself without being run: its version, from the custom section
//! `version` (wasm-metadata's OCI annotation sections, as `wasm-tools metadata add --version`
//! and tool-guest's `component_version!` write it).
//!
//! The section comes from whoever built the component, so it is bounded and checked where it is
//! read: a version is at most [`MAX_VERSION_BYTES`] of printable ASCII, or it is not shown.

use wasmparser::{Parser, Payload};

/// The custom section's name.
pub const VERSION_SECTION: &str = "version";
/// The longest version kept (semver with a pre-release and build part fits many times over).
pub const MAX_VERSION_BYTES: usize = 64;

/// The version `bytes` (a component or a core module) carries: the outermost component's
/// `version` section, else the first one in a nested module (where a Rust guest's linker puts
/// it). `None` when there is none, or when it is not a short printable version.
pub fn version(bytes: &[u8]) -> Option<String> {
    let mut depth = 0usize;
    let mut nested = None;
    for payload in Parser::new(0).parse_all(bytes) {
        // A component that does not parse is refused by the compiler with the reason; here it
        // simply has no version.
        let Ok(payload) = payload else { return None };
        match payload {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::CustomSection(reader) if reader.name() == VERSION_SECTION => {
                let found = checked(reader.data());
                if depth == 0 {
                    return found;
                }
                nested = nested.or(found);
            }
            _ => {}
        }
    }
    nested
}

/// `data` as a version, if it is one: 1 to [`MAX_VERSION_BYTES`] bytes of printable ASCII.
fn checked(data: &[u8]) -> Option<String> {
    let ok = !data.is_empty() && data.len() <= MAX_VERSION_BYTES && data.iter().all(|b| b.is_ascii_graphic());
    ok.then(|| String::from_utf8_lossy(data).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A core module: the header and one custom section per `(name, data)`.
    fn module(sections: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = b"\0asm\x01\0\0\0".to_vec();
        for (name, data) in sections {
            let mut body = vec![name.len() as u8];
            body.extend_from_slice(name.as_bytes());
            body.extend_from_slice(data);
            out.push(0); // custom section id
            out.push(body.len() as u8); // LEB128, < 128 here
            out.extend_from_slice(&body);
        }
        out
    }

    #[test]
    fn reads_the_version_section() {
        assert_eq!(version(&module(&[("producers", b"x"), ("version", b"1.2.3-rc.1")])).as_deref(), Some("1.2.3-rc.1"));
    }

    #[test]
    fn none_without_one() {
        assert_eq!(version(&module(&[("producers", b"x")])), None);
        assert_eq!(version(b"not wasm at all"), None);
    }

    #[test]
    fn refuses_what_is_not_a_short_printable_version() {
        assert_eq!(version(&module(&[("version", b"1.0\x1b[2J")])), None);
        assert_eq!(version(&module(&[("version", b"")])), None);
        assert_eq!(version(&module(&[("version", &[b'1'; MAX_VERSION_BYTES + 1])])), None);
        assert_eq!(
            version(&module(&[("version", &[b'1'; MAX_VERSION_BYTES])])).map(|v| v.len()),
            Some(MAX_VERSION_BYTES)
        );
    }
}
