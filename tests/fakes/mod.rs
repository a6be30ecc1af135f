//! The local servers the integration tests and benches talk to, in place of the cloud services
//! the components reach through the host: Amazon Bedrock's `Retrieve` ([`bedrock`]) and a
//! Couchbase cluster ([`couchbase`]).

pub mod bedrock;
pub mod couchbase;
