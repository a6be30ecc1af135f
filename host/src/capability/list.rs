//! The list of capabilities, one line each, and what is generated from it: each type that
//! goes over every capability has a field per line, and each function a step per line.
//! Nothing here knows one capability from another.

use std::path::{Path, PathBuf};

use serde::de::MapAccess;
use wasmtime::component::Linker;

use super::keys::{CapabilityKeys, Disabled, Table};
use super::{CallCx, Capability, CapabilityStore, GrantContext, SandboxError, StoreContext};
use crate::support::exposition::Exposition;
use crate::support::values::KeyError;

/// Capability `C`'s part of a type generated from the list.
pub trait HasCapability<C: Capability> {
    /// `C`'s state in this store.
    fn state_mut(&mut self) -> &mut C::State;
}

macro_rules! capabilities {
    ($( $(#[$cfg:meta])? $field:ident: $cap:ty ),* $(,)?) => {
        /// The capabilities' keys of `[tools.NAME.grants]`, as written.
        #[derive(Default)]
        pub struct RawCapabilityGrants {
            $( $(#[$cfg])? $field: <$cap as Capability>::RawGrant, )*
            disabled: Vec<Disabled>,
        }

        /// The capabilities' top-level tables, as written.
        #[derive(Default)]
        pub struct RawCapabilitySections {
            $( $(#[$cfg])? $field: <$cap as Capability>::RawSection, )*
            disabled: Vec<Disabled>,
        }

        /// The capabilities' keys of `[host]`, as written.
        #[derive(Default)]
        pub struct RawCapabilityHost {
            $( $(#[$cfg])? $field: <$cap as Capability>::RawHost, )*
            disabled: Vec<Disabled>,
        }

        capability_keys!(RawCapabilityGrants, Table::Grants, GRANT_KEYS, read_grant; $( $(#[$cfg])? $field: $cap ),*);
        capability_keys!(RawCapabilitySections, Table::Top, SECTION_KEYS, read_section; $( $(#[$cfg])? $field: $cap ),*);
        capability_keys!(RawCapabilityHost, Table::Host, HOST_KEYS, read_host; $( $(#[$cfg])? $field: $cap ),*);

        /// What an instance is granted, capability by capability.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Grants {
            $(
                #[doc = concat!("`", stringify!($cap), "`'s grant.")]
                $(#[$cfg])? pub $field: <$cap as Capability>::Grant,
            )*
        }

        impl Grants {
            /// Each capability's grant from its keys of `raw`; an error's key is relative to
            /// the grants table.
            pub fn parse(
                raw: RawCapabilityGrants,
                sections: &CapabilitySections,
                cx: &GrantContext<'_>,
            ) -> Result<Grants, KeyError> {
                if let Some(d) = raw.disabled.first() {
                    return Err(d.error());
                }
                Ok(Grants {
                    $( $(#[$cfg])? $field: <$cap as Capability>::grant(raw.$field, &sections.$field, cx)?, )*
                })
            }

            /// Whether these grants use section `section` (`models.NAME`): an instance that
            /// does restarts when the section's file changes.
            pub fn uses(&self, section: &str) -> bool {
                $( $(#[$cfg])? if <$cap as Capability>::uses(&self.$field, section) { return true; } )*
                false
            }

            /// The directories these grants let a guest write, as `(key under the grants
            /// table, host directory)`.
            pub fn writable_dirs(&self) -> Vec<(String, PathBuf)> {
                let mut dirs = Vec::new();
                $( $(#[$cfg])? dirs.extend(<$cap as Capability>::writable_dirs(&self.$field)); )*
                dirs
            }
        }

        /// The capabilities' operator-level sections, validated.
        #[derive(Debug, Clone, Default)]
        pub struct CapabilitySections {
            $(
                #[doc = concat!("`", stringify!($cap), "`'s sections.")]
                $(#[$cfg])? pub $field: <$cap as Capability>::Section,
            )*
        }

        impl CapabilitySections {
            /// Validates the sections; an error's key is the section's (`couchbase.NAME.key`).
            pub fn parse(
                raw: RawCapabilitySections,
                host: RawCapabilityHost,
                base: &Path,
            ) -> Result<CapabilitySections, KeyError> {
                if let Some(d) = host.disabled.first() {
                    return Err(d.error().under("host"));
                }
                if let Some(d) = raw.disabled.first() {
                    return Err(d.error());
                }
                let mut sections = CapabilitySections {
                    $( $(#[$cfg])? $field: <$cap as Capability>::section(raw.$field, host.$field, base)?, )*
                };
                $(
                    $(#[$cfg])?
                    if let Some(linked) = <$cap as Capability>::linked(&sections)? {
                        sections.$field = linked;
                    }
                )*
                Ok(sections)
            }

            /// Files the sections read, for the host's watcher: `(the file that changes, the
            /// file it reloads)`.
            pub fn watched(&self) -> Vec<(PathBuf, PathBuf)> {
                let mut files = Vec::new();
                $( $(#[$cfg])? files.extend(<$cap as Capability>::watched(&self.$field)); )*
                files
            }

            /// The directories the host itself reads for a section, as `(section, directory)`:
            /// no read-write grant may overlap one.
            pub fn host_read_dirs(&self) -> Vec<(String, PathBuf)> {
                let mut dirs = Vec::new();
                $( $(#[$cfg])? dirs.extend(<$cap as Capability>::host_read_dirs(&self.$field)); )*
                dirs
            }

            /// Writes every capability's own figures for `/metrics`.
            pub fn metrics(&self, app: &AppStates, out: &mut Exposition) {
                $( $(#[$cfg])? <$cap as Capability>::metrics(&self.$field, &app.$field, out); )*
            }

            /// What the capabilities cannot reach now, for `/readyz`: one line each.
            pub async fn unreachable(&self) -> Vec<String> {
                let mut lines = Vec::new();
                $( $(#[$cfg])? lines.extend(<$cap as Capability>::unreachable(&self.$field).await); )*
                lines
            }

            /// Whether a section reads `path` (a file [`CapabilitySections::reload`] takes).
            pub fn reads(&self, path: &Path) -> bool {
                self.watched().iter().any(|(_, file)| file == path)
            }

            /// Reloads, in `app`, what the sections read from `path`: the sections now serving a
            /// changed file (`models.NAME`), or why the file is refused (the loaded one keeps
            /// serving). Blocks: call it off the async runtime.
            pub fn reload(&self, path: &Path, app: &AppStates) -> Result<Vec<String>, String> {
                let mut changed = Vec::new();
                $( $(#[$cfg])? changed.extend(<$cap as Capability>::reload(&self.$field, path, &app.$field)?); )*
                Ok(changed)
            }
        }

        /// Each capability's state for one app (a registry and everything it loads), as Spin's
        /// factors have an app state: built once with the engine and handed to every store made
        /// from it, so two registries in one process share nothing.
        #[derive(Default)]
        pub struct AppStates {
            $(
                #[doc = concat!("`", stringify!($cap), "`'s app state.")]
                $(#[$cfg])? pub $field: <$cap as Capability>::AppState,
            )*
        }

        /// One store's state of every capability.
        pub struct CapabilityStates {
            $( $(#[$cfg])? $field: <$cap as Capability>::State, )*
        }

        $(
            $(#[$cfg])?
            impl HasCapability<$cap> for CapabilityStates {
                fn state_mut(&mut self) -> &mut <$cap as Capability>::State {
                    &mut self.$field
                }
            }
        )*

        impl CapabilityStates {
            /// The states for a new store of an instance granted `grants`.
            pub fn new(grants: &Grants, cx: &mut StoreContext<'_>) -> Result<CapabilityStates, SandboxError> {
                let app = cx.app;
                Ok(CapabilityStates {
                    $( $(#[$cfg])? $field: <$cap as Capability>::state(&grants.$field, &app.$field, cx)?, )*
                })
            }

            /// Before each guest call: who it runs for.
            pub fn begin_call(&mut self, cx: &CallCx<'_>) {
                $( $(#[$cfg])? <$cap as Capability>::begin_call(&mut self.$field, cx); )*
            }

            /// What the capabilities refused since the last call (appended to a tool's error).
            pub fn take_refusals(&self) -> Vec<String> {
                let mut refusals = Vec::new();
                $( $(#[$cfg])? refusals.extend(<$cap as Capability>::take_refusals(&self.$field)); )*
                refusals
            }

            /// After each guest call: what a call started ends with it.
            pub async fn end_call(&mut self) {
                $( $(#[$cfg])? <$cap as Capability>::end_call(&mut self.$field).await; )*
            }

            /// Capability `C`'s state.
            pub fn get_mut<C: Capability>(&mut self) -> &mut C::State
            where
                Self: HasCapability<C>,
            {
                self.state_mut()
            }
        }

        /// Adds every capability to `l`, after WASI.
        pub fn link_all<T: CapabilityStore>(l: &mut Linker<T>) -> wasmtime::Result<()> {
            $( $(#[$cfg])? <$cap as Capability>::link(l)?; )*
            super::link_types(l)
        }

        #[cfg(test)]
        #[allow(clippy::vec_init_then_push, reason = "a push per line of the list, some under cfg")]
        /// Every capability's keys in `table`, with its name (for the tests).
        pub(crate) fn keys_of(table: Table) -> Vec<(&'static str, &'static [&'static str])> {
            let mut keys = Vec::new();
            $(
                $(#[$cfg])?
                keys.push((stringify!($field), match table {
                    Table::Grants => <$cap as Capability>::GRANT_KEYS,
                    Table::Top => <$cap as Capability>::SECTION_KEYS,
                    Table::Host => <$cap as Capability>::HOST_KEYS,
                }));
            )*
            keys
        }
    };
}

/// [`CapabilityKeys`] for one of the raw tables: `$keys` and `$read` are the table's const and
/// method of [`Capability`].
macro_rules! capability_keys {
    ($raw:ident, $table:expr, $keys:ident, $read:ident; $( $(#[$cfg:meta])? $field:ident: $cap:ty ),*) => {
        impl CapabilityKeys for $raw {
            const TABLE: Table = $table;

            fn owns(key: &str) -> bool {
                $( $(#[$cfg])? if <$cap as Capability>::$keys.contains(&key) { return true; } )*
                false
            }

            fn keys() -> Vec<&'static str> {
                let mut keys = Vec::new();
                $( $(#[$cfg])? keys.extend_from_slice(<$cap as Capability>::$keys); )*
                keys
            }

            fn read<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
                $(
                    $(#[$cfg])?
                    if <$cap as Capability>::$keys.contains(&key) {
                        return <$cap as Capability>::$read(&mut self.$field, key, map);
                    }
                )*
                Err(serde::de::Error::custom(format!("no capability reads `{key}`")))
            }

            fn disabled(&mut self) -> &mut Vec<Disabled> {
                &mut self.disabled
            }
        }
    };
}

// The list. Order is the order of linking and of the "expected one of" lists.
capabilities! {
    files: super::files::Files,
    http: super::http::Http,
    embedder: super::embedder::Embedder,
    progress: super::progress::Reporting,
    corpora: super::corpus::Corpora,
    client: super::client::Client,
    #[cfg(feature = "bedrock")]
    bedrock: super::bedrock::Bedrock,
    #[cfg(feature = "couchbase")]
    couchbase: super::couchbase::Couchbase,
    #[cfg(feature = "nn")]
    nn: super::nn::Nn,
}

#[cfg(test)]
mod tests {
    use super::super::keys::OPTIONAL;
    use super::*;

    /// The keys a host built without a capability knows it by are the capability's own.
    #[test]
    fn the_optional_capabilities_name_their_own_keys() {
        for table in [Table::Grants, Table::Top, Table::Host] {
            let listed = keys_of(table);
            for optional in OPTIONAL.iter().filter(|c| c.enabled) {
                let own = listed.iter().find(|(field, _)| *field == optional.feature).map(|(_, keys)| *keys);
                assert_eq!(own, Some(optional.keys(table)), "{} in {table:?}", optional.feature);
            }
        }
    }

    /// No key is claimed twice in one table.
    #[test]
    fn no_key_has_two_owners() {
        for table in [Table::Grants, Table::Top, Table::Host] {
            let mut all: Vec<&str> = keys_of(table).into_iter().flat_map(|(_, keys)| keys.iter().copied()).collect();
            let n = all.len();
            all.sort_unstable();
            all.dedup();
            assert_eq!(all.len(), n, "{table:?}");
        }
    }
}
