//! The runs page's age filter: a run's age is the time since its latest
//! waypoint; a filter keeps runs active within a span (`lt5m`) or idle
//! longer than one (`gt1h`).

use std::time::{Duration, SystemTime};

/// An age filter: idle longer than (`gt`) or active within (`lt`) a span.
pub(crate) fn parse_age(age: &str) -> Option<(bool, Duration)> {
    let (older, span) = if let Some(s) = age.strip_prefix("gt") {
        (true, s)
    } else {
        (false, age.strip_prefix("lt")?)
    };
    let split = span.find(|c: char| !c.is_ascii_digit())?;
    let n: u64 = span[..split].parse().ok()?;
    let unit = match &span[split..] {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => return None,
    };
    Some((older, Duration::from_secs(n.saturating_mul(unit))))
}

pub(crate) fn age_matches(
    filter: Option<(bool, Duration)>,
    last: Option<SystemTime>,
    now: SystemTime,
) -> bool {
    let Some((older, span)) = filter else {
        return true;
    };
    // A run that never wrote a waypoint has no age to compare.
    let Some(last) = last else {
        return false;
    };
    let idle = now.duration_since(last).unwrap_or_default();
    if older { idle > span } else { idle <= span }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_parse_both_ways() {
        assert_eq!(parse_age("lt5m"), Some((false, Duration::from_secs(300))));
        assert_eq!(parse_age("gt1d"), Some((true, Duration::from_secs(86400))));
        assert_eq!(parse_age("5m"), None);
        assert_eq!(parse_age("lt5y"), None);
    }

    #[test]
    fn age_filters_compare_last_activity() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(10_000);
        let recent = Some(now - Duration::from_secs(60));
        let old = Some(now - Duration::from_secs(7200));
        let within_5m = parse_age("lt5m");
        let over_1h = parse_age("gt1h");
        assert!(age_matches(within_5m, recent, now));
        assert!(!age_matches(within_5m, old, now));
        assert!(age_matches(over_1h, old, now));
        assert!(!age_matches(over_1h, recent, now));
        assert!(!age_matches(over_1h, None, now));
        assert!(age_matches(None, None, now));
    }
}
