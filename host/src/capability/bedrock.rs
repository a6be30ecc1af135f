//! Amazon Bedrock knowledge bases (`quarry:retrieval/bedrock`), from the `quarry-bedrock`
//! crate; here, its place in the capability list.

use wasmtime::component::Linker;

pub use quarry_bedrock::*;

use super::{Capability, CapabilityStore, GrantContext, SandboxError, StoreContext, state_of};
use crate::support::values::KeyError;

/// The Bedrock capability: `grants.bedrock`.
pub struct Bedrock;

impl Capability for Bedrock {
    const GRANT_KEYS: &'static [&'static str] = &["bedrock"];

    type RawGrant = Option<RawGrant>;
    type Grant = Option<BedrockGrant>;
    type RawSection = ();
    type RawHost = ();
    type Section = ();
    type AppState = ();
    type State = State;

    fn read_grant<'de, A: serde::de::MapAccess<'de>>(
        raw: &mut Option<RawGrant>,
        _key: &str,
        map: &mut A,
    ) -> Result<(), A::Error> {
        *raw = Some(map.next_value()?);
        Ok(())
    }

    fn grant(raw: Option<RawGrant>, _: &(), cx: &GrantContext<'_>) -> Result<Option<BedrockGrant>, KeyError> {
        raw.map(|b| grant(b, cx.deadline).map_err(|e| e.under("bedrock"))).transpose()
    }

    fn state(grant: &Option<BedrockGrant>, _: &(), cx: &mut StoreContext<'_>) -> Result<State, SandboxError> {
        Ok(State::new(grant.as_ref(), cx.max_output))
    }

    fn link<T: CapabilityStore>(l: &mut Linker<T>) -> wasmtime::Result<()> {
        link(l, state_of::<Bedrock, T>)
    }
}
