//! Amazon Bedrock, absent: the host was built without the `bedrock` feature (see
//! [`super::absent`]).

use std::time::Duration;

use wasmtime::component::Linker;

use crate::support::values::KeyError;

/// `grants.bedrock` as written: any table, refused by [`grant`].
pub type RawGrant = toml::Table;

/// No grant can be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BedrockGrant {}

/// Refuses the grant: this host has no Bedrock.
pub fn grant(_raw: RawGrant, _deadline: Duration) -> Result<BedrockGrant, KeyError> {
    Err(super::absent::missing("Bedrock", "bedrock"))
}

/// Nothing to hold.
pub struct State;

impl State {
    /// The state of a store: nothing.
    pub fn new(_grant: Option<&BedrockGrant>, _max_bytes: u64) -> State {
        State
    }
}

/// Links nothing: a component that imports `quarry:retrieval/bedrock` fails to link.
pub fn link<T: Send + 'static>(_l: &mut Linker<T>, _get: fn(&mut T) -> &mut State) -> wasmtime::Result<()> {
    Ok(())
}
