//! `redact_connection_string` on arbitrary text, and on a password planted
//! in each connection-string shape: never panics, no `password=` keeps a
//! value, and the planted password never survives.
//! Twin: `tests/store_props.rs` (`no_password_survives_redaction_in_any_shape`,
//! `any_text_is_redacted_without_a_panic_and_no_password_value_is_left`).
#![no_main]

use aegis_runtime::__internal::redact_connection_string;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&shape, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let shown = redact_connection_string(&text);
    let lower = shown.to_ascii_lowercase();
    for (i, _) in lower.match_indices("password=") {
        let after = shown[i + "password=".len()..].trim_start();
        assert!(after.is_empty() || after.starts_with("[REDACTED]"), "{text:?} -> {shown:?}");
    }

    // A password (marked, so nothing else contains it) in one shape.
    let password = format!("Zq9{text}");
    let quoted = format!("'{}'", password.replace('\\', "\\\\").replace('\'', "\\'"));
    let connection = match shape % 7 {
        0 => format!("redis://user:{password}@cache:6379/0"),
        1 => format!("redis:/user:{password}@cache"),
        2 => format!("redis//:{password}@cache"),
        3 => format!("redis://:{password}@"),
        4 => format!("user:{password}@cache"),
        5 => format!("postgresql://app:{password}@db:5432/x"),
        _ => format!("host=db user=app password={quoted} dbname=x"),
    };
    let shown = redact_connection_string(&connection);
    assert!(!shown.contains("Zq9"), "{connection:?} -> {shown:?}");
});
