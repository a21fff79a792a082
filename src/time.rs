//! Instants as the Kubernetes API writes them (RFC 3339, UTC, whole seconds), to and from Unix
//! seconds: one spelling for every status field the operator writes.

use k8s_openapi::jiff::Timestamp;

/// Seconds since the Unix epoch as `2027-03-01T00:00:00Z`.
pub fn rfc3339(seconds: i64) -> String {
    Timestamp::from_second(seconds)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|_| format!("{seconds} s after the Unix epoch"))
}

/// An RFC 3339 instant as Unix seconds; `None` when it does not parse.
pub fn unix_seconds(text: &str) -> Option<i64> {
    text.parse::<Timestamp>().ok().map(|t| t.as_second())
}

/// Now, in Unix seconds.
pub fn now_seconds() -> i64 {
    Timestamp::now().as_second()
}

/// Now, in Unix milliseconds.
pub fn now_millis() -> i64 {
    Timestamp::now().as_millisecond()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_round_trip_through_their_rfc3339_spelling() {
        assert_eq!(rfc3339(1_796_428_800), "2026-12-05T00:00:00Z");
        assert_eq!(unix_seconds("2026-12-05T00:00:00Z"), Some(1_796_428_800));
        assert_eq!(
            unix_seconds("2026-12-05T01:00:00+01:00"),
            Some(1_796_428_800)
        );
        assert_eq!(unix_seconds("yesterday"), None);
        for s in [0, 1_796_428_799, 4_102_444_800] {
            assert_eq!(unix_seconds(&rfc3339(s)), Some(s));
        }
    }
}
