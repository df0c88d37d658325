//! The times a restore may target: RFC 3339 (`2024-05-01T12:30:00Z`,
//! `2024-05-01T14:30:00.250+02:00`) or milliseconds since the Unix epoch,
//! as transactions carry them.

pub use zabkeeper_store::clock::civil_from_days;
/// Why a time was not understood.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{text:?} is not a time: {reason} (give RFC 3339, e.g. 2024-05-01T12:30:00Z, or milliseconds since the Unix epoch)"
)]
pub struct TimeError {
    /// What was given.
    pub text: String,
    /// What is wrong.
    pub reason: String,
}

/// Days from 1970-01-01 to the given date, proleptic Gregorian (Howard
/// Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let month = i64::from(month);
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Milliseconds since the Unix epoch of `text` (RFC 3339 or a number of
/// ms). Fractions below a millisecond are dropped: a transaction's time, in
/// whole ms, is at or before the time given exactly when it is at or before
/// the whole ms.
pub fn parse_time(text: &str) -> Result<i64, TimeError> {
    let fail = |reason: &str| TimeError { text: text.to_string(), reason: reason.to_string() };
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse::<i64>().map_err(|_| fail("too many milliseconds"));
    }
    let b = t.as_bytes();
    if b.len() < 20 {
        return Err(fail("too short for RFC 3339"));
    }
    let number = |range: std::ops::Range<usize>, what: &str| -> Result<u32, TimeError> {
        let part = &t[range];
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().map_err(|_| fail(what))
        } else {
            Err(fail(&format!("{what} {part:?} is not a number")))
        }
    };
    let separators_ok =
        b[4] == b'-' && b[7] == b'-' && matches!(b[10], b'T' | b't' | b' ') && b[13] == b':' && b[16] == b':';
    if !separators_ok {
        return Err(fail("not laid out as YYYY-MM-DDTHH:MM:SS"));
    }
    let year = i64::from(number(0..4, "the year")?);
    let month = number(5..7, "the month")?;
    let day = number(8..10, "the day")?;
    let (hour, minute, second) =
        (number(11..13, "the hour")?, number(14..16, "the minute")?, number(17..19, "the second")?);
    if !(1..=12).contains(&month) {
        return Err(fail("the month is not 01 to 12"));
    }
    if day == 0 || day > days_in_month(year, month) {
        return Err(fail("no such day in that month"));
    }
    // 60: a leap second, which Unix time folds into the next.
    if hour > 23 || minute > 59 || second > 60 {
        return Err(fail("the time of day is out of range"));
    }
    let mut rest = &t[19..];
    let mut millis = 0i64;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(fail("a '.' without digits"));
        }
        for (i, d) in fraction[..digits.min(3)].bytes().enumerate() {
            millis += i64::from(d - b'0') * [100, 10, 1][i];
        }
        rest = &fraction[digits..];
    }
    let offset_minutes: i64 = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first() {
                Some(b'+') => 1,
                Some(b'-') => -1,
                _ => return Err(fail("no time zone (Z or +HH:MM)")),
            };
            let zone = &rest[1..];
            let (h, m) = zone.split_once(':').ok_or_else(|| fail("a time zone is +HH:MM or -HH:MM"))?;
            let two = |s: &str| s.len() == 2 && s.bytes().all(|c| c.is_ascii_digit());
            if !two(h) || !two(m) {
                return Err(fail("a time zone is +HH:MM or -HH:MM"));
            }
            let (h, m): (i64, i64) =
                (h.parse().map_err(|_| fail("zone hours"))?, m.parse().map_err(|_| fail("zone minutes"))?);
            if h > 23 || m > 59 {
                return Err(fail("the time zone is out of range"));
            }
            sign * (h * 60 + m)
        }
    };
    let days = days_from_civil(year, month, day);
    let seconds =
        days * 86_400 + i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second) - offset_minutes * 60;
    Ok(seconds * 1000 + millis)
}

/// `ms` since the Unix epoch as RFC 3339 in UTC with milliseconds, as
/// [`parse_time`] reads it back.
pub fn format_time(ms: i64) -> String {
    let (days, in_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (year, month, day) = civil_from_days(days);
    let (h, m, s, milli) = (in_day / 3_600_000, in_day / 60_000 % 60, in_day / 1000 % 60, in_day % 1000);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_as_rfc_3339_and_read_back() {
        assert_eq!(format_time(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(format_time(-1000), "1969-12-31T23:59:59.000Z");
        for ms in [0, 951_782_400_000, 1_709_164_800_001, 4_102_444_799_999] {
            assert_eq!(parse_time(&format_time(ms)), Ok(ms), "{ms}");
        }
    }

    #[test]
    fn rfc_3339_and_milliseconds_parse() {
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse_time("1700000000123"), Ok(1_700_000_000_123));
        assert_eq!(parse_time("2023-11-14T22:13:20.123Z"), Ok(1_700_000_000_123));
        assert_eq!(parse_time("2023-11-14T23:13:20.123456+01:00"), Ok(1_700_000_000_123));
        assert_eq!(parse_time("2023-11-14 21:13:20.5-01:00"), Ok(1_700_000_000_500));
        assert_eq!(parse_time("2024-02-29T00:00:00z"), Ok(1_709_164_800_000));
        assert_eq!(parse_time("1969-12-31T23:59:59Z"), Ok(-1000));
    }

    #[test]
    fn nonsense_is_refused_with_the_reason() {
        for bad in [
            "",
            "yesterday",
            "2023-11-14",
            "2023-11-14T22:13:20",
            "2023-13-01T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2023-11-14T24:00:00Z",
            "2023-11-14T22:13:20.Z",
            "2023-11-14T22:13:20+0100",
            "2023-11-14T22:13:20+01:60",
            "2023-1x-14T22:13:20Z",
            "99999999999999999999999",
        ] {
            let e = parse_time(bad).expect_err(bad);
            assert_eq!(e.text, bad);
            assert!(e.to_string().contains("RFC 3339"), "{e}");
        }
    }
}
