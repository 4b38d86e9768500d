//! Duration literals: `"500ms"`, `"10s"`, `"15m"`, `"1h"`, `"1m30s"`.
//!
//! Integer amounts of `h`, `m`, `s` and `ms`, largest unit first, each unit
//! at most once. Parsed to whole milliseconds at compile time.

/// Why a duration literal was rejected; each message says what to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DurationError {
    Negative,
    Fractional { exact: Option<String> },
    Unparsable,
    UnitOrder,
    Overflow,
}

impl DurationError {
    pub(crate) fn message(&self, literal: &str) -> String {
        match self {
            DurationError::Negative => {
                format!("`{literal}` is negative: a duration is a positive amount such as \"10s\"")
            }
            DurationError::Fractional { exact: Some(exact) } => {
                format!("`{literal}` has a fractional unit: write \"{exact}\" instead")
            }
            DurationError::Fractional { exact: None } => format!(
                "`{literal}` has a fractional unit, and durations have millisecond precision: write whole milliseconds such as \"1500ms\""
            ),
            DurationError::Unparsable => format!(
                "`{literal}` is not a duration: write an integer and a unit (`ms`, `s`, `m`, `h`), e.g. \"500ms\", \"10s\", \"15m\", \"1h\" or \"1m30s\""
            ),
            DurationError::UnitOrder => format!(
                "`{literal}` repeats a unit or puts a smaller unit first: write each unit once, largest first, e.g. \"1h30m\""
            ),
            DurationError::Overflow => format!("`{literal}` is too long a duration"),
        }
    }
}

const UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

/// The duration in milliseconds.
pub(crate) fn parse_millis(text: &str) -> Result<u64, DurationError> {
    if text.starts_with('-') {
        return Err(DurationError::Negative);
    }
    if text.contains('.') {
        return Err(DurationError::Fractional {
            exact: fractional_millis(text).map(format_millis),
        });
    }
    let mut rest = text;
    let mut total: u64 = 0;
    let mut last_rank: Option<usize> = None;
    if rest.is_empty() {
        return Err(DurationError::Unparsable);
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(DurationError::Unparsable);
        }
        let amount: u64 = rest[..digits]
            .parse()
            .map_err(|_| DurationError::Overflow)?;
        rest = &rest[digits..];
        let (rank, unit, factor) = unit_at(rest).ok_or(DurationError::Unparsable)?;
        if last_rank.is_some_and(|last| rank <= last) {
            return Err(DurationError::UnitOrder);
        }
        last_rank = Some(rank);
        rest = &rest[unit.len()..];
        total = amount
            .checked_mul(factor)
            .and_then(|ms| total.checked_add(ms))
            .ok_or(DurationError::Overflow)?;
    }
    Ok(total)
}

/// The unit at the start of `rest`: `ms` is tried before `m`.
fn unit_at(rest: &str) -> Option<(usize, &'static str, u64)> {
    let candidates = [(3, "ms"), (0, "h"), (1, "m"), (2, "s")];
    candidates.iter().find_map(|&(rank, unit)| {
        // Only after `starts_with` is `unit.len()` a char boundary of `rest`.
        let after = rest.strip_prefix(unit)?;
        let follows_digit = after.bytes().next().is_none_or(|b| b.is_ascii_digit());
        follows_digit.then_some((rank, unit, UNITS[rank].1))
    })
}

/// `"1.5s"` → 1500, when the literal is one decimal amount of one unit that
/// comes to whole milliseconds.
fn fractional_millis(text: &str) -> Option<u64> {
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = text.split_at(split);
    let (_, factor) = UNITS.iter().find(|(u, _)| *u == unit)?;
    let (whole, frac) = number.split_once('.')?;
    if whole.is_empty() && frac.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || frac.len() > 9
    {
        return None;
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let scale = 10u64.pow(u32::try_from(frac.len()).ok()?);
    let frac_value: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    let frac_ms = frac_value.checked_mul(*factor)?;
    if frac_ms % scale != 0 {
        return None;
    }
    whole.checked_mul(*factor)?.checked_add(frac_ms / scale)
}

/// Milliseconds in the literal syntax, largest unit first: 90000 → `1m30s`.
pub(crate) fn format_millis(mut ms: u64) -> String {
    if ms == 0 {
        return "0ms".to_string();
    }
    let mut out = String::new();
    for (unit, factor) in UNITS {
        let amount = ms / factor;
        if amount > 0 {
            out.push_str(&format!("{amount}{unit}"));
            ms -= amount * factor;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_single_and_combined_units() {
        assert_eq!(parse_millis("500ms"), Ok(500));
        assert_eq!(parse_millis("10s"), Ok(10_000));
        assert_eq!(parse_millis("15m"), Ok(900_000));
        assert_eq!(parse_millis("1h"), Ok(3_600_000));
        assert_eq!(parse_millis("1m30s"), Ok(90_000));
        assert_eq!(parse_millis("1h2m3s4ms"), Ok(3_723_004));
        assert_eq!(parse_millis("0s"), Ok(0));
    }

    #[test]
    fn rejects_what_is_not_a_duration() {
        for bad in ["", "10", "s", "10 s", "10sec", "10S", "ten s", "10s ", "1d"] {
            assert_eq!(parse_millis(bad), Err(DurationError::Unparsable), "{bad:?}");
        }
        assert_eq!(parse_millis("-5s"), Err(DurationError::Negative));
        assert_eq!(parse_millis("30s1m"), Err(DurationError::UnitOrder));
        assert_eq!(parse_millis("1s1s"), Err(DurationError::UnitOrder));
        assert_eq!(
            parse_millis("99999999999999999999h"),
            Err(DurationError::Overflow)
        );
        assert_eq!(
            parse_millis("9999999999999999h"),
            Err(DurationError::Overflow)
        );
    }

    #[test]
    fn suggests_the_exact_whole_form_of_a_fraction() {
        let exact = |s: &str| match parse_millis(s) {
            Err(DurationError::Fractional { exact }) => exact,
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(exact("1.5s").as_deref(), Some("1s500ms"));
        assert_eq!(exact("0.5h").as_deref(), Some("30m"));
        assert_eq!(exact(".25m").as_deref(), Some("15s"));
        assert_eq!(exact("1.5ms"), None);
        assert_eq!(exact("1.5x"), None);
        assert_eq!(exact("1.5s30ms"), None);
    }

    #[test]
    fn formats_millis_largest_unit_first() {
        assert_eq!(format_millis(0), "0ms");
        assert_eq!(format_millis(90_000), "1m30s");
        assert_eq!(format_millis(60_000), "1m");
        assert_eq!(format_millis(3_723_004), "1h2m3s4ms");
    }

    #[test]
    fn messages_say_what_to_write() {
        assert!(
            DurationError::Fractional {
                exact: Some("1s500ms".into())
            }
            .message("1.5s")
            .contains("write \"1s500ms\" instead")
        );
        assert!(DurationError::Unparsable.message("x").contains("\"1m30s\""));
    }
}
