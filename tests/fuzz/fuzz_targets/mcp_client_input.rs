//! What a client sends that the round-4 surfaces parse, one input each, chosen by the first
//! byte: input responses and a request state (a 2026-07-28 round), a resource URI (subscribed
//! to, qualified and localized, claimed), a resource template and a URI matched against it, a
//! completion request. Checks: a refused state is -32602; a URI of the instance's own survives
//! qualifying and localizing; what a template matches names its parameters; subscriptions stay
//! within their bound.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use quarry::mcp::asking::{RoundAsker, StateSeal};
use quarry::mcp::subscriptions::{SESSION_BYTES, Subscriptions, host_budget};
use quarry::registry::ask::{SELF_PREFIX, localize, owns, qualify};
use quarry::registry::uri_template::Template;

fn seal() -> &'static StateSeal {
    static SEAL: OnceLock<StateSeal> = OnceLock::new();
    SEAL.get_or_init(|| StateSeal::from_env().expect("a random key"))
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(rest);
    let (first, second) = text.split_once('\n').unwrap_or((&text, ""));
    match which % 4 {
        0 => {
            let responses = serde_json::from_str(first).ok();
            let state = (!second.is_empty()).then_some(second);
            match RoundAsker::new(seal(), ("t.ask", "{}", b"Bearer t"), None, responses, state) {
                Ok(asker) => assert!(asker.input_required(seal()).is_none(), "nothing was asked"),
                Err(e) => assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS, "{}", e.message),
            }
        }
        1 => {
            let mut subscribed = Subscriptions::new(host_budget());
            for uri in text.split('\n') {
                let _ = subscribed.add(uri);
            }
            assert!(subscribed.bytes() <= SESSION_BYTES);
            for uri in text.split('\n') {
                subscribed.remove(uri);
            }
            assert_eq!(subscribed.bytes(), 0);
            if first.starts_with(SELF_PREFIX) {
                assert!(owns(first, &[]));
                assert_eq!(localize(&qualify(first, "inst"), "inst"), first);
            }
        }
        2 => {
            if let Ok(t) = Template::parse(first)
                && let Some(params) = t.matches(second)
            {
                let names: Vec<&str> = t.params().collect();
                assert!(params.iter().all(|(name, _)| names.contains(&name.as_str())), "{params:?}");
            }
        }
        _ => {
            if let Ok(r) = serde_json::from_str::<rmcp::model::CompleteRequestParams>(&text) {
                let chosen = r.context.and_then(|c| c.arguments).unwrap_or_default();
                let _ = serde_json::to_string(&chosen);
            }
        }
    }
});
