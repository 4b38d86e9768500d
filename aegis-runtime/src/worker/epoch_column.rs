//! How the SQL queues store a lease epoch: a `BIGINT`, which holds every
//! epoch a run will reach; the conversions saturate instead of failing.

/// An epoch read back from its column (a negative value, which no queue
/// writes, reads as 0).
pub(super) fn epoch_from(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// An epoch as its column stores it.
pub(super) fn epoch_to(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_saturate_at_the_column_bounds() {
        assert_eq!(epoch_to(u64::MAX), i64::MAX);
        assert_eq!(epoch_from(-1), 0);
        assert_eq!(epoch_from(epoch_to(41)), 41);
    }
}
