//! Times as OpenClaw's session files write them: ISO 8601 strings in UTC with milliseconds
//! (JavaScript's `toISOString`), read back as ms since the Unix epoch (what `Date.parse` gives).

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in ms since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The current time as `YYYY-MM-DDTHH:MM:SS.fffZ` (JavaScript's `toISOString`).
pub fn iso_now() -> String {
    iso_from_ms(now_ms())
}

/// `ms` since the Unix epoch as `toISOString` writes it.
pub fn iso_from_ms(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    // Civil date from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000
    )
}

/// `YYYY-MM-DDTHH:MM:SS[.fff]Z` → ms since the Unix epoch (what `Date.parse` gives for the ISO
/// strings OpenClaw writes).
pub fn parse_iso_ms(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || !text.ends_with('Z') {
        return None;
    }
    let num = |s: &str| s.parse::<i64>().ok();
    let (year, month, day) = (num(&text[0..4])?, num(&text[5..7])?, num(&text[8..10])?);
    let (hour, minute, second) = (
        num(&text[11..13])?,
        num(&text[14..16])?,
        num(&text[17..19])?,
    );
    let millis = match &text[19..text.len() - 1] {
        "" => 0,
        fraction => {
            let digits = fraction.strip_prefix('.')?;
            let padded = format!("{digits:0<3}");
            num(&padded[..3])?
        }
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_times_read_as_javascript_reads_them() {
        assert_eq!(
            parse_iso_ms("2024-05-15T20:10:00.000Z"),
            Some(1_715_803_800_000)
        );
        assert_eq!(parse_iso_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_iso_ms("2026-12-02T17:05:57.499Z"),
            Some(1_796_231_157_499)
        );
        assert_eq!(parse_iso_ms("yesterday"), None);
    }

    #[test]
    fn iso_times_round_trip() {
        for ms in [0, 1_715_803_800_000, 1_796_231_157_499, 951_782_400_000] {
            assert_eq!(
                parse_iso_ms(&iso_from_ms(ms)),
                Some(ms),
                "{}",
                iso_from_ms(ms)
            );
        }
        assert_eq!(iso_from_ms(1_715_803_800_000), "2024-05-15T20:10:00.000Z");
    }
}
