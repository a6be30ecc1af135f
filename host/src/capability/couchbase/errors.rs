//! SDK and core-agent errors as the WIT's `couchbase-error`, by their typed kinds.

use std::fmt;

use couchbase::error::ErrorKind;

use crate::bindings::quarry::retrieval::couchbase::CouchbaseError;

/// Errors inside the capability, before they become the WIT's.
pub(super) type Result<T> = std::result::Result<T, CouchbaseError>;

pub(super) fn internal(e: impl fmt::Display) -> CouchbaseError {
    CouchbaseError::Service(format!("internal: {e}"))
}

/// Maps an SDK error: what is missing is `not-found`, what did not answer `unavailable`, the
/// rest is the server's `service` error, with the SDK's text (it carries the server's).
pub(super) fn sdk_error(e: &couchbase::error::Error) -> CouchbaseError {
    let text = e.to_string();
    match e.kind() {
        ErrorKind::BucketNotFound
        | ErrorKind::ScopeNotFound
        | ErrorKind::CollectionNotFound
        | ErrorKind::IndexNotFound => CouchbaseError::NotFound(text),
        ErrorKind::AuthenticationFailure | ErrorKind::ServiceNotAvailable(_) | ErrorKind::RequestCanceled => {
            CouchbaseError::Unavailable(text)
        }
        ErrorKind::InvalidArgument(_) => CouchbaseError::InvalidRequest(text),
        _ => CouchbaseError::Service(text),
    }
}

/// Maps a core (agent) error the same way, by the Search service's own error kinds.
pub(super) fn core_error(e: &couchbase_core::error::Error) -> CouchbaseError {
    use couchbase_core::error::ErrorKind as Core;
    use couchbase_core::searchx::error::{ErrorKind as Search, ServerErrorKind as Server};
    let text = e.to_string();
    match e.kind() {
        Core::Search(se) => match se.kind() {
            Search::Server(s) => match s.kind() {
                Server::IndexNotFound | Server::SourceNotFound => CouchbaseError::NotFound(text),
                Server::AuthenticationFailure => CouchbaseError::Unavailable(text),
                _ => CouchbaseError::Service(text),
            },
            Search::InvalidArgument { .. } => CouchbaseError::InvalidRequest(text),
            _ => CouchbaseError::Service(text),
        },
        Core::InvalidArgument { .. } => CouchbaseError::InvalidRequest(text),
        _ => CouchbaseError::Service(text),
    }
}
