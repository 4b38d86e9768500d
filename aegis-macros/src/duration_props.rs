//! Property tests of the duration literal parser; the fuzz target
//! `fuzz/fuzz_targets/macro_duration.rs` is its twin on raw bytes.

use proptest::prelude::*;

use crate::duration::{DurationError, format_millis, parse_millis};

/// Found by `arbitrary_text_never_panics`: the unit check sliced the text
/// after a digit at a byte offset that could fall inside a multi-byte
/// character, so `"5秒"` panicked the macro instead of being refused.
#[test]
fn a_non_ascii_unit_is_refused_not_a_panic() {
    for text in ["5秒", "5ኻ", "1m秒", "7µs", "3h€"] {
        assert_eq!(parse_millis(text), Err(DurationError::Unparsable), "{text}");
    }
}

const UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Arbitrary text is a duration or a typed error, never a panic; an
    /// error's message quotes the literal.
    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        if let Err(e) = parse_millis(&text) {
            prop_assert!(e.message(&text).contains(&text));
        }
    }

    /// Text built from the literal alphabet, where parser edge cases live.
    #[test]
    fn literal_shaped_text_never_panics(text in "[0-9hms.\\- ]{0,24}") {
        let _ = parse_millis(&text);
    }

    /// Formatting then parsing gives the same milliseconds back.
    #[test]
    fn format_then_parse_round_trips(ms in any::<u64>()) {
        prop_assert_eq!(parse_millis(&format_millis(ms)), Ok(ms));
    }

    /// Any amounts of distinct units, largest first, sum exactly (or
    /// overflow as a typed error).
    #[test]
    fn well_formed_literals_sum_their_units(
        amounts in prop::collection::vec(proptest::option::of(0u64..1_000_000_000), 4),
    ) {
        let parts: Vec<(u64, &str, u64)> = amounts
            .iter()
            .zip(UNITS)
            .filter_map(|(a, (unit, factor))| a.map(|a| (a, unit, factor)))
            .collect();
        prop_assume!(!parts.is_empty());
        let literal: String = parts.iter().map(|(a, unit, _)| format!("{a}{unit}")).collect();
        let sum = parts
            .iter()
            .try_fold(0u64, |acc, (a, _, f)| a.checked_mul(*f).and_then(|v| acc.checked_add(v)));
        match sum {
            Some(total) => prop_assert_eq!(parse_millis(&literal), Ok(total)),
            None => prop_assert_eq!(parse_millis(&literal), Err(DurationError::Overflow)),
        }
    }

    /// A unit out of order (or repeated) is always refused.
    #[test]
    fn smaller_unit_first_is_refused(a in 1u64..1000, b in 1u64..1000, i in 0usize..4, j in 0usize..4) {
        prop_assume!(i >= j);
        let literal = format!("{a}{}{b}{}", UNITS[i].0, UNITS[j].0);
        prop_assert_eq!(parse_millis(&literal), Err(DurationError::UnitOrder));
    }
}
