//! Bounds on what a guest stores in an outgoing request, checked where the host stores it.
//!
//! wasmtime-wasi-http 48 keeps the strings a guest sets on an `outgoing-request` (method,
//! scheme, authority, path with query) after a character check, and checks the authority's
//! length only when the request is sent: a guest that never sends made the host hold
//! megabytes per request (672 MiB in five calls under a 64 MiB grant). The linker shadows the
//! four setters with wrappers that refuse a longer string (the setter's `result` error, as for
//! a malformed one) and then call wasmtime-wasi-http's own implementation.
//!
//! Header names and values (of requests and trailers alike) live in `fields`, which
//! wasmtime-wasi-http bounds itself at [`super::FIELD_SIZE_LIMIT`] when they are stored. With
//! these bounds, one outgoing request holds at most its header set and [`MAX_REQUEST_STRINGS`]
//! bytes of strings, less than the `HOST_BYTES_PER_HANDLE` each host resource is charged
//! against `grants.memory` (by the runtime's memory limiter).

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi_http::WasiHttpCtxView;
use wasmtime_wasi_http::p2::bindings::http::types::{HostOutgoingRequest as Setters, Method, Scheme};
use wasmtime_wasi_http::p2::types::HostOutgoingRequest;

use super::send::MAX_AUTHORITY;

/// The longest method a guest may set (the longest registered method is 17 bytes).
pub const MAX_METHOD: usize = 64;
/// The longest scheme a guest may set.
pub const MAX_SCHEME: usize = 64;
/// The longest path with query a guest may set (8 KiB, the common limit of servers).
pub const MAX_PATH_WITH_QUERY: usize = 8 << 10;
/// The most bytes of strings one outgoing request can hold.
pub const MAX_REQUEST_STRINGS: usize = MAX_METHOD + MAX_SCHEME + MAX_AUTHORITY + MAX_PATH_WITH_QUERY;

/// Whether a method fits [`MAX_METHOD`].
fn method_fits(m: &Method) -> bool {
    !matches!(m, Method::Other(s) if s.len() > MAX_METHOD)
}

/// Whether a scheme fits [`MAX_SCHEME`].
fn scheme_fits(s: &Option<Scheme>) -> bool {
    !matches!(s, Some(Scheme::Other(s)) if s.len() > MAX_SCHEME)
}

/// Whether an optional string fits `max` bytes.
fn fits(s: &Option<String>, max: usize) -> bool {
    s.as_ref().is_none_or(|s| s.len() <= max)
}

/// Shadows the setters of `outgoing-request` (added by [`super::link`] first) with bounded ones.
pub fn shadow_setters<T: Send + 'static>(
    l: &mut Linker<T>,
    get: fn(&mut T) -> WasiHttpCtxView<'_>,
) -> wasmtime::Result<()> {
    type Req = Resource<HostOutgoingRequest>;
    l.allow_shadowing(true);
    let mut types = l.instance("wasi:http/types@0.2.12")?;
    types.func_wrap(
        "[method]outgoing-request.set-method",
        move |mut store: StoreContextMut<'_, T>, (req, method): (Req, Method)| {
            if !method_fits(&method) {
                return Ok((Err(()),));
            }
            Ok((Setters::set_method(&mut get(store.data_mut()), req, method)?,))
        },
    )?;
    types.func_wrap(
        "[method]outgoing-request.set-scheme",
        move |mut store: StoreContextMut<'_, T>, (req, scheme): (Req, Option<Scheme>)| {
            if !scheme_fits(&scheme) {
                return Ok((Err(()),));
            }
            Ok((Setters::set_scheme(&mut get(store.data_mut()), req, scheme)?,))
        },
    )?;
    types.func_wrap(
        "[method]outgoing-request.set-authority",
        move |mut store: StoreContextMut<'_, T>, (req, authority): (Req, Option<String>)| {
            if !fits(&authority, MAX_AUTHORITY) {
                return Ok((Err(()),));
            }
            Ok((Setters::set_authority(&mut get(store.data_mut()), req, authority)?,))
        },
    )?;
    types.func_wrap(
        "[method]outgoing-request.set-path-with-query",
        move |mut store: StoreContextMut<'_, T>, (req, path): (Req, Option<String>)| {
            if !fits(&path, MAX_PATH_WITH_QUERY) {
                return Ok((Err(()),));
            }
            Ok((Setters::set_path_with_query(&mut get(store.data_mut()), req, path)?,))
        },
    )?;
    l.allow_shadowing(false);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_past_their_bound_are_refused() {
        assert!(method_fits(&Method::Get));
        assert!(method_fits(&Method::Other("PROPFIND".into())));
        assert!(!method_fits(&Method::Other("X".repeat(MAX_METHOD + 1))));
        assert!(scheme_fits(&None) && scheme_fits(&Some(Scheme::Https)));
        assert!(!scheme_fits(&Some(Scheme::Other("s".repeat(MAX_SCHEME + 1)))));
        assert!(fits(&None, 1) && fits(&Some("ab".into()), 2) && !fits(&Some("abc".into()), 2));
        // What one request can hold stays under what its resource is charged.
        const {
            assert!(
                MAX_REQUEST_STRINGS + super::super::FIELD_SIZE_LIMIT < crate::runtime::limiter::HOST_BYTES_PER_HANDLE
            )
        };
    }
}
