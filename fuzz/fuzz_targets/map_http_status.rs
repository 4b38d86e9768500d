//! `map_http_status` on an arbitrary status and body, with a credential
//! planted in the body: never panics, the excerpt stays within
//! `EXCERPT_LIMIT` characters, and no 6-character fragment of the planted
//! secret survives in the error's text or its `Debug`.
//! Twin: `tests/llm_props.rs` (`no_planted_secret_fragment_survives`).
#![no_main]

use aegis::error::LlmError;
use aegis_runtime::__internal::{EXCERPT_LIMIT, map_http_status};
use libfuzzer_sys::fuzz_target;

const SECRET: &str = "AegisFuzzPlantedSecret0123456789abcdefXYZ";

fn carried(e: &LlmError) -> Option<&str> {
    match e {
        LlmError::ProviderError { message, .. } | LlmError::AuthenticationError(message) => {
            Some(message)
        }
        _ => None,
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let status = u16::from_le_bytes([data[0], data[1]]);
    let shape = data[2] % 4;
    let text = String::from_utf8_lossy(&data[3..]);
    let (before, after) = text.split_at(text.char_indices().nth(text.chars().count() / 2).map_or(0, |(i, _)| i));
    let planted = match shape {
        0 => format!("sk-{SECRET}"),
        1 => format!("Authorization: Bearer {SECRET}"),
        2 => format!("\"x-api-key\": \"{SECRET}\""),
        _ => format!("?api_key={SECRET}&"),
    };
    let body = format!("{before} {planted}\n{after}");
    for body in [text.as_ref(), body.as_str()] {
        let e = map_http_status("fuzz", status, body, &[("retry-after", body)]);
        let _ = e.transience();
        if let Some(t) = carried(&e) {
            assert!(t.chars().count() <= EXCERPT_LIMIT);
        }
    }
    let e = map_http_status("fuzz", status, &body, &[]);
    let rendered = format!("{e} {e:?}");
    let chars: Vec<char> = SECRET.chars().collect();
    for w in chars.windows(6) {
        let fragment: String = w.iter().collect();
        // Only a fragment the fuzzer did not type itself counts as a leak.
        if !text.contains(&fragment) {
            assert!(!rendered.contains(&fragment), "{fragment} leaked: {rendered}");
        }
    }
});
