//! SDK and core-agent errors as the WIT's `couchbase-error`, by their typed kinds.

use std::fmt;

use couchbase::error::ErrorKind;

use crate::wit::CouchbaseError;

/// An error inside the capability: the WIT's, which the guest gets, or a bug of the host's,
/// which fails the call as a fault (never disguised as the cluster's `service` error).
#[derive(Debug)]
pub(super) enum Error {
    /// For the guest.
    Wit(CouchbaseError),
    /// The host's own failure.
    Host(String),
}

impl From<CouchbaseError> for Error {
    fn from(e: CouchbaseError) -> Self {
        Error::Wit(e)
    }
}

/// Results inside the capability.
pub(super) type Result<T> = std::result::Result<T, Error>;

/// A failure of the host's own code (a value it cannot serialise, a TLS setting it cannot build).
pub(super) fn internal(e: impl fmt::Display) -> Error {
    Error::Host(e.to_string())
}

/// The result of a call as the WIT returns it: the guest's error, or a trap for a host bug.
pub(super) fn to_wit<T>(r: Result<T>) -> wasmtime::Result<std::result::Result<T, CouchbaseError>> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(Error::Wit(e)) => Ok(Err(e)),
        Err(Error::Host(m)) => {
            tracing::error!(target: "quarry::couchbase", "a bug in the host's Couchbase capability: {m}");
            Err(wasmtime::format_err!("a bug in the host's Couchbase capability: {m}"))
        }
    }
}

/// Maps an SDK error: what is missing is `not-found`, what did not answer `unavailable`, the
/// rest is the server's `service` error, with the SDK's text (it carries the server's).
pub(super) fn sdk_error(e: &couchbase::error::Error) -> Error {
    let text = e.to_string();
    Error::Wit(match e.kind() {
        ErrorKind::BucketNotFound
        | ErrorKind::ScopeNotFound
        | ErrorKind::CollectionNotFound
        | ErrorKind::IndexNotFound => CouchbaseError::NotFound(text),
        ErrorKind::AuthenticationFailure | ErrorKind::ServiceNotAvailable(_) | ErrorKind::RequestCanceled => {
            CouchbaseError::Unavailable(text)
        }
        ErrorKind::InvalidArgument(_) => CouchbaseError::InvalidRequest(text),
        _ => CouchbaseError::Service(text),
    })
}

/// Maps a core (agent) error the same way, by the Search service's own error kinds.
pub(super) fn core_error(e: &couchbase_core::error::Error) -> Error {
    use couchbase_core::error::ErrorKind as Core;
    use couchbase_core::searchx::error::{ErrorKind as Search, ServerErrorKind as Server};
    let text = e.to_string();
    Error::Wit(match e.kind() {
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_bug_is_a_fault_not_the_clusters_error() {
        assert!(
            matches!(to_wit::<()>(Err(internal("cannot serialise"))), Err(e) if e.to_string().contains("a bug in the host"))
        );
        let e = CouchbaseError::NotFound("x".into());
        assert!(matches!(to_wit::<()>(Err(e.into())), Ok(Err(CouchbaseError::NotFound(_)))));
    }
}
