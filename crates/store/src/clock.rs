//! The only place that reads the wall clock (the pure core gets time as
//! ticks and as the `now_ms` carried by each tick), and the calendar the
//! places that print a time share.

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}

/// Days since 1970-01-01 to (year, month 1..=12, day 1..=31), proleptic
/// Gregorian: Howard Hinnant's `civil_from_days`, the inverse of
/// `days_from_civil`.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    // Both within range by construction: day 1..=31, month 1..=12.
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}
