//! Usage metering arithmetic (pure; Momento v0.9, issue 30, `../shared/spec/MOMENTO-V09.md`
//! section 7): each member's billable memory by the documented source order, and GB-hours
//! accounted per UTC day and source in exact integers (byte-seconds), so no float rounding
//! ever reaches billing data. GB is 10^9 bytes, an hour 3600 s.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;

use crate::api::metering::{MeteredDay, MeteringGap, ValkeyMeteringRecordStatus};
use crate::time::{rfc3339, unix_seconds};

/// Operator downtime longer than this since a record's `accountedUntil` is accounted as a gap.
pub const GAP_SECONDS: i64 = 120;

/// The floor every member is raised to: 100 MB.
pub const FLOOR_BYTES: u64 = 100_000_000;

/// Days kept one by one in a record; older ones are folded into one total.
pub const MAX_DAYS: usize = 400;

/// Where a member's billable figure came from, the first that applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// The resolved config's `resources.memory` (request and limit of the container).
    Reserved,
    /// Its `maxmemory` from the resolved `valkey` settings.
    MaxMemory,
    /// The highest `used_memory_rss` sampled during the interval.
    Observed,
    /// Any of the above raised to [`FLOOR_BYTES`], or nothing known yet.
    Floor,
}

impl Source {
    pub const ALL: [Source; 4] = [
        Source::Reserved,
        Source::MaxMemory,
        Source::Observed,
        Source::Floor,
    ];

    pub fn parse(text: &str) -> Option<Source> {
        Source::ALL.into_iter().find(|s| s.as_str() == text)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Source::Reserved => "Reserved",
            Source::MaxMemory => "MaxMemory",
            Source::Observed => "Observed",
            Source::Floor => "Floor",
        }
    }
}

/// A memory size in Valkey's units: `k` 10^3, `kb` 2^10, `m` 10^6, `mb` 2^20, `g` 10^9,
/// `gb` 2^30, case ignored; a bare number is bytes.
pub fn parse_valkey_bytes(text: &str) -> Option<u64> {
    let text = text.trim().to_ascii_lowercase();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let factor: u64 = match unit {
        "" | "b" => 1,
        "k" => 1_000,
        "kb" => 1 << 10,
        "m" => 1_000_000,
        "mb" => 1 << 20,
        "g" => 1_000_000_000,
        "gb" => 1 << 30,
        _ => return None,
    };
    number.checked_mul(factor)
}

/// A member's billable bytes and their source: reserved memory, else `maxmemory` (0 counts
/// as unset, as in Valkey), else the observed RSS peak, each raised to the floor.
pub fn member_bytes(
    reserved: Option<u64>,
    maxmemory: Option<&str>,
    observed_rss_peak: Option<u64>,
) -> (Source, u64) {
    let found = reserved
        .filter(|b| *b > 0)
        .map(|b| (Source::Reserved, b))
        .or_else(|| {
            maxmemory
                .and_then(parse_valkey_bytes)
                .filter(|b| *b > 0)
                .map(|b| (Source::MaxMemory, b))
        })
        .or_else(|| observed_rss_peak.map(|b| (Source::Observed, b)));
    match found {
        Some((source, bytes)) if bytes >= FLOOR_BYTES => (source, bytes),
        _ => (Source::Floor, FLOOR_BYTES),
    }
}

/// One UTC day of a record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Day {
    /// `YYYY-MM-DD`.
    pub date: String,
    /// Byte-seconds per source.
    pub by_source: BTreeMap<Source, u128>,
    /// The most members counted at once that day.
    pub peak_nodes: usize,
}

impl Day {
    pub fn byte_seconds(&self) -> u128 {
        self.by_source.values().sum()
    }
}

/// What a record has accounted: days oldest first, and the byte-seconds of days folded away.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    pub days: Vec<Day>,
    pub before_days: u128,
}

impl Ledger {
    /// Adds the members' usage from `from` to `to` (Unix seconds), split at UTC midnight;
    /// days beyond [`MAX_DAYS`] are folded into `before_days`, oldest first.
    pub fn account(&mut self, from: i64, to: i64, members: &[(Source, u64)]) {
        for (day_start, seconds) in split_at_midnight(from, to) {
            let date = utc_date(day_start);
            if self.days.last().is_none_or(|d| d.date != date) {
                self.days.push(Day {
                    date,
                    ..Day::default()
                });
            }
            let day = self.days.last_mut().expect("pushed above");
            for (source, bytes) in members {
                *day.by_source.entry(*source).or_default() += *bytes as u128 * seconds as u128;
            }
            day.peak_nodes = day.peak_nodes.max(members.len());
        }
        while self.days.len() > MAX_DAYS {
            let oldest = self.days.remove(0);
            self.before_days += oldest.byte_seconds();
        }
    }

    /// Everything accounted, in byte-seconds.
    pub fn total(&self) -> u128 {
        self.before_days + self.days.iter().map(Day::byte_seconds).sum::<u128>()
    }
}

/// `[from, to)` cut at every UTC midnight: (start of each piece, its length in seconds).
fn split_at_midnight(from: i64, to: i64) -> Vec<(i64, i64)> {
    let mut pieces = Vec::new();
    let mut start = from;
    while start < to {
        let midnight = (start.div_euclid(86_400) + 1) * 86_400;
        let end = midnight.min(to);
        pieces.push((start, end - start));
        start = end;
    }
    pieces
}

fn utc_date(second: i64) -> String {
    Timestamp::from_second(second)
        .map(|t| t.strftime("%Y-%m-%d").to_string())
        .unwrap_or_default()
}

/// Byte-seconds as GB-hours with six decimals (rounded half up): `"309.120000"`.
pub fn gb_hours(byte_seconds: u128) -> String {
    // One millionth of a GB-hour is 3.6e12 / 1e6 byte-seconds.
    const MICRO_GB_HOUR: u128 = 3_600_000;
    let micro = (byte_seconds + MICRO_GB_HOUR / 2) / MICRO_GB_HOUR;
    format!("{}.{:06}", micro / 1_000_000, micro % 1_000_000)
}

impl Ledger {
    /// The ledger a record's status holds, from its exact byte-seconds (the GB-hours strings
    /// are derived and rounded, never read back).
    pub fn from_status(status: &ValkeyMeteringRecordStatus) -> Ledger {
        let days = status
            .days
            .iter()
            .map(|day| Day {
                date: day.date.clone(),
                by_source: day
                    .byte_seconds
                    .iter()
                    .filter_map(|(source, n)| Some((Source::parse(source)?, n.parse().ok()?)))
                    .collect(),
                peak_nodes: usize::try_from(day.peak_nodes).unwrap_or(0),
            })
            .collect();
        Ledger {
            days,
            before_days: status.byte_seconds_before_days.parse().unwrap_or(0),
        }
    }

    fn write_into(&self, status: &mut ValkeyMeteringRecordStatus) {
        status.unit = "GB-hours".into();
        status.total_byte_seconds = self.total().to_string();
        status.total_gb_hours = gb_hours(self.total());
        status.byte_seconds_before_days = self.before_days.to_string();
        status.total_before_days = gb_hours(self.before_days);
        status.days = self
            .days
            .iter()
            .map(|day| MeteredDay {
                date: day.date.clone(),
                gb_hours: gb_hours(day.byte_seconds()),
                peak_nodes: day.peak_nodes as i64,
                by_source: day
                    .by_source
                    .iter()
                    .map(|(s, n)| (s.as_str().to_string(), gb_hours(*n)))
                    .collect(),
                byte_seconds: day
                    .by_source
                    .iter()
                    .map(|(s, n)| (s.as_str().to_string(), n.to_string()))
                    .collect(),
            })
            .collect();
    }
}

/// What one accounting round knows about a record's cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Round {
    /// Now, Unix seconds.
    pub now: i64,
    /// Every member whose pod exists, by its figure.
    pub members: Vec<(Source, u64)>,
    /// When the cluster was deleted, once it is (nothing is added after it).
    pub deleted_at: Option<i64>,
}

/// A record's status after a round: usage from `accountedUntil` (or `started_at` for a new
/// record) to now, or to the cluster's deletion, which closes the record for good. A stretch
/// longer than [`GAP_SECONDS`] (the operator was down) is accounted with the members of
/// now and listed in `gaps`, so a bill never silently drops hours.
pub fn advance(
    status: &ValkeyMeteringRecordStatus,
    started_at: i64,
    round: &Round,
) -> ValkeyMeteringRecordStatus {
    let mut next = status.clone();
    if status.cluster_deleted_at.is_some() {
        return next;
    }
    let from = unix_seconds(&status.accounted_until).unwrap_or(started_at);
    let to = round
        .deleted_at
        .map_or(round.now, |d| d.min(round.now))
        .max(from);
    let mut ledger = Ledger::from_status(status);
    if to > from {
        ledger.account(from, to, &round.members);
    }
    if to - from > GAP_SECONDS {
        next.gaps.push(MeteringGap {
            from: rfc3339(from),
            to: rfc3339(to),
        });
    }
    ledger.write_into(&mut next);
    next.accounted_until = rfc3339(to);
    next.cluster_deleted_at = round.deleted_at.map(|_| rfc3339(to));
    next
}

/// Where a new record starts counting (Unix seconds). A cluster's first record starts at the
/// cluster's creation when the operator sees it within [`GAP_SECONDS`] of it (the usual case:
/// nothing it ran is missed); a cluster that was already running when the operator first saw
/// it (an operator installed or upgraded onto an existing fleet) starts now, because the hours
/// before were never observed and a bill must not invent them. A record after a release starts
/// now, from zero.
pub fn record_start(created: Option<i64>, sequence: i64, now: i64) -> i64 {
    match created {
        Some(created) if sequence == 1 && now - created <= GAP_SECONDS => created.min(now),
        _ => now,
    }
}

/// The record's name: `<namespace>.<cluster>.<first 8 hex of its uid>.<sequence>`, so a
/// cluster deleted and recreated under its name gets records of its own.
pub fn record_name(namespace: &str, cluster: &str, uid: &str, sequence: i64) -> String {
    let short: String = uid.chars().filter(|c| *c != '-').take(8).collect();
    format!("{namespace}.{cluster}.{short}.{sequence}")
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn valkey_units_are_decimal_or_binary_as_valkey_reads_them() {
        for (text, bytes) in [
            ("100", 100),
            ("1k", 1_000),
            ("1KB", 1_024),
            ("2m", 2_000_000),
            ("2mb", 2 << 20),
            ("3g", 3_000_000_000),
            ("3Gb", 3 << 30),
            (" 768mb ", 768 << 20),
        ] {
            assert_eq!(parse_valkey_bytes(text), Some(bytes), "{text}");
        }
        for text in ["", "mb", "1.5gb", "1tb", "-1", "1 gb"] {
            assert_eq!(parse_valkey_bytes(text), None, "{text}");
        }
    }

    #[test]
    fn the_first_source_that_applies_counts_raised_to_the_floor() {
        let gib = 1u64 << 30;
        assert_eq!(
            member_bytes(Some(gib), Some("512mb"), Some(7)),
            (Source::Reserved, gib)
        );
        assert_eq!(
            member_bytes(None, Some("768mb"), Some(7)),
            (Source::MaxMemory, 768 << 20)
        );
        assert_eq!(
            member_bytes(None, Some("0"), Some(300_000_000)),
            (Source::Observed, 300_000_000)
        );
        assert_eq!(
            member_bytes(None, Some("10mb"), None),
            (Source::Floor, FLOOR_BYTES)
        );
        assert_eq!(member_bytes(None, None, None), (Source::Floor, FLOOR_BYTES));
    }

    #[test]
    fn a_day_of_six_reserved_members_is_their_gigabytes_times_24() {
        // Six members reserving 1.073741824 GB each, for 24 h from midnight.
        let mut ledger = Ledger::default();
        let members = vec![(Source::Reserved, 1u64 << 30); 6];
        let midnight = 1_796_428_800; // 2026-12-05T00:00:00Z
        ledger.account(midnight, midnight + 86_400, &members);
        assert_eq!(ledger.days.len(), 1);
        assert_eq!(ledger.days[0].date, "2026-12-05");
        assert_eq!(ledger.days[0].peak_nodes, 6);
        assert_eq!(gb_hours(ledger.total()), "154.618823");
    }

    #[test]
    fn usage_is_split_at_utc_midnight() {
        let mut ledger = Ledger::default();
        let midnight = 1_796_428_800;
        ledger.account(
            midnight - 1800,
            midnight + 3600,
            &[(Source::Floor, FLOOR_BYTES)],
        );
        let dates: Vec<&str> = ledger.days.iter().map(|d| d.date.as_str()).collect();
        assert_eq!(dates, ["2026-12-04", "2026-12-05"]);
        assert_eq!(gb_hours(ledger.days[0].byte_seconds()), "0.050000");
        assert_eq!(gb_hours(ledger.days[1].byte_seconds()), "0.100000");
    }

    #[test]
    fn days_beyond_the_limit_are_folded_not_dropped() {
        let mut ledger = Ledger::default();
        let start = 1_796_428_800;
        for day in 0..(MAX_DAYS as i64 + 5) {
            let at = start + day * 86_400;
            ledger.account(at, at + 3600, &[(Source::Floor, FLOOR_BYTES)]);
        }
        assert_eq!(ledger.days.len(), MAX_DAYS);
        assert_eq!(ledger.before_days, 5 * FLOOR_BYTES as u128 * 3600);
        assert_eq!(gb_hours(ledger.total()), "40.500000");
    }

    fn round(now: i64, members: usize) -> Round {
        Round {
            now,
            members: vec![(Source::Reserved, 1u64 << 30); members],
            deleted_at: None,
        }
    }

    #[test]
    fn a_record_grows_by_its_members_bytes_times_the_elapsed_time() {
        let start = 1_796_428_800;
        let first = advance(
            &ValkeyMeteringRecordStatus::default(),
            start,
            &round(start + 60, 3),
        );
        assert_eq!(first.accounted_until, "2026-12-05T00:01:00Z");
        assert_eq!(
            first.total_byte_seconds,
            (3u128 * (1 << 30) * 60).to_string()
        );
        assert_eq!(first.unit, "GB-hours");
        let second = advance(&first, start, &round(start + 120, 3));
        assert_eq!(
            second.total_byte_seconds,
            (3u128 * (1 << 30) * 120).to_string()
        );
        assert_eq!(second.days[0].by_source["Reserved"], second.total_gb_hours);
        assert_eq!(second.days[0].peak_nodes, 3);
        assert!(second.gaps.is_empty());
        // Read back from the status alone, the ledger is exact.
        assert_eq!(
            Ledger::from_status(&second).total(),
            3u128 * (1 << 30) * 120
        );
    }

    #[test]
    fn deletion_closes_the_record_at_the_deletion_and_nothing_is_added_after() {
        let start = 1_796_428_800;
        let open = advance(
            &ValkeyMeteringRecordStatus::default(),
            start,
            &round(start + 60, 2),
        );
        let closing = Round {
            deleted_at: Some(start + 90),
            ..round(start + 100, 2)
        };
        let closed = advance(&open, start, &closing);
        assert_eq!(
            closed.cluster_deleted_at.as_deref(),
            Some("2026-12-05T00:01:30Z")
        );
        assert_eq!(closed.accounted_until, "2026-12-05T00:01:30Z");
        assert_eq!(
            closed.total_byte_seconds,
            (2u128 * (1 << 30) * 90).to_string()
        );
        assert_eq!(advance(&closed, start, &round(start + 5000, 9)), closed);
    }

    #[test]
    fn operator_downtime_is_accounted_and_listed_as_a_gap() {
        let start = 1_796_428_800;
        let open = advance(
            &ValkeyMeteringRecordStatus::default(),
            start,
            &round(start + 60, 1),
        );
        let after = advance(&open, start, &round(start + 60 + 3600, 1));
        assert_eq!(
            after.gaps,
            vec![MeteringGap {
                from: "2026-12-05T00:01:00Z".into(),
                to: "2026-12-05T01:01:00Z".into()
            }]
        );
        assert_eq!(after.total_byte_seconds, ((1u128 << 30) * 3660).to_string());
    }

    #[test]
    fn a_first_record_starts_at_its_clusters_creation_unless_that_was_long_before() {
        let now = 1_796_428_800;
        assert_eq!(record_start(Some(now - 5), 1, now), now - 5);
        assert_eq!(
            record_start(Some(now - GAP_SECONDS), 1, now),
            now - GAP_SECONDS
        );
        // Running long before the operator saw it: its past was not observed.
        assert_eq!(record_start(Some(now - 86_400), 1, now), now);
        // After a release: from now, from zero.
        assert_eq!(record_start(Some(now - 5), 2, now), now);
        assert_eq!(record_start(None, 1, now), now);
        // A clock behind the API server's never starts a record in the future.
        assert_eq!(record_start(Some(now + 3), 1, now), now);
    }

    #[test]
    fn record_names_carry_namespace_cluster_uid_and_sequence() {
        assert_eq!(
            record_name("shop", "cache", "3f0c9a1b-77aa-4c2e-9d1e-0123456789ab", 2),
            "shop.cache.3f0c9a1b.2"
        );
    }

    proptest! {
        /// However an interval is cut into accounting steps, the total is the same
        /// byte-seconds: nothing is lost or counted twice at step or day boundaries.
        #[test]
        fn accounting_in_steps_adds_up_to_accounting_at_once(
            from in 1_796_000_000i64..1_797_000_000,
            cuts in proptest::collection::vec(1i64..200_000, 1..20),
            bytes in proptest::collection::vec(1u64..(64 << 30), 1..8),
        ) {
            let members: Vec<(Source, u64)> =
                bytes.iter().map(|b| (Source::Reserved, *b)).collect();
            let to = from + cuts.iter().sum::<i64>();
            let mut once = Ledger::default();
            once.account(from, to, &members);
            let mut stepped = Ledger::default();
            let mut at = from;
            for cut in &cuts {
                stepped.account(at, at + cut, &members);
                at += cut;
            }
            prop_assert_eq!(once.total(), stepped.total());
            prop_assert_eq!(once.days, stepped.days);
        }
    }
}
