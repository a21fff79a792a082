//! When a cluster's scheduled backups are due (`spec.backup.schedule`, five-field cron in UTC,
//! parsed by `croner`), what a scheduled backup is named, and which older ones its completion
//! removes (`spec.backup.keep`). Pure: the scheduler and the backup controller do the I/O.

use chrono::{DateTime, TimeZone, Utc};
use croner::Cron;

/// The schedule, or why it is not one (for the webhook's refusal and the cluster's Event).
pub fn parse(schedule: &str) -> Result<Cron, String> {
    let fields = schedule.split_whitespace().count();
    if fields != 5 {
        return Err(format!(
            "spec.backup.schedule {schedule:?} has {fields} fields; give five (minute hour day-of-month month day-of-week, UTC), e.g. \"0 3 * * *\""
        ));
    }
    schedule
        .parse::<Cron>()
        .map_err(|e| format!("spec.backup.schedule {schedule:?} is not a cron expression: {e}"))
}

/// The latest scheduled time at or before `now`, if it is after `since` (the cluster's
/// creation: nothing is owed for times before the cluster existed).
pub fn latest_due(cron: &Cron, since: i64, now: i64) -> Option<i64> {
    let now = Utc.timestamp_opt(now, 0).single()?;
    let due: DateTime<Utc> = cron.find_previous_occurrence(&now, true).ok()?;
    (due.timestamp() > since).then_some(due.timestamp())
}

/// `<cluster>-<YYYYMMDD-HHMM>` (UTC) of the scheduled time.
pub fn backup_name(cluster: &str, scheduled_for: i64) -> String {
    let at = Utc
        .timestamp_opt(scheduled_for, 0)
        .single()
        .unwrap_or_default();
    format!("{cluster}-{}", at.format("%Y%m%d-%H%M"))
}

/// A completed scheduled backup, as retention sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    pub name: String,
    pub scheduled_for: i64,
    /// Its objects' prefix below the bucket.
    pub path: String,
}

/// Which completed backups a new one of the same schedule replaces once it completes: all but
/// the newest `keep - 1` (the new one is the `keep`th).
pub fn to_prune(mut completed: Vec<Kept>, keep: i32) -> Vec<Kept> {
    completed.sort_by(|a, b| {
        b.scheduled_for
            .cmp(&a.scheduled_for)
            .then(b.name.cmp(&a.name))
    });
    let keep_old = usize::try_from(keep.max(1) - 1).unwrap_or(0);
    completed.into_iter().skip(keep_old).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> i64 {
        DateTime::parse_from_rfc3339(text).unwrap().timestamp()
    }

    #[test]
    fn five_fields_in_utc_and_nothing_else() {
        assert!(parse("0 3 * * *").is_ok());
        assert!(parse("*/15 * * * 1-5").is_ok());
        let six = parse("0 0 3 * * *").unwrap_err();
        assert!(six.contains("has 6 fields; give five"), "{six}");
        let bad = parse("61 * * * *").unwrap_err();
        assert!(bad.contains("is not a cron expression"), "{bad}");
    }

    #[test]
    fn the_latest_due_time_is_owed_once_and_never_before_the_cluster() {
        let daily = parse("0 3 * * *").unwrap();
        let created = at("2026-12-01T10:00:00Z");
        assert_eq!(
            latest_due(&daily, created, at("2026-12-02T02:59:59Z")),
            None
        );
        assert_eq!(
            latest_due(&daily, created, at("2026-12-02T03:00:00Z")),
            Some(at("2026-12-02T03:00:00Z"))
        );
        // Days missed while the operator was down: only the latest is taken.
        assert_eq!(
            latest_due(&daily, created, at("2026-12-05T18:00:00Z")),
            Some(at("2026-12-05T03:00:00Z"))
        );
        let minutely = parse("* * * * *").unwrap();
        assert_eq!(
            latest_due(&minutely, created, at("2026-12-05T18:00:59Z")),
            Some(at("2026-12-05T18:00:00Z"))
        );
    }

    #[test]
    fn names_sort_by_time() {
        assert_eq!(
            backup_name("cart", at("2026-12-05T03:00:00Z")),
            "cart-20261205-0300"
        );
    }

    #[test]
    fn keep_two_leaves_the_newest_old_one_beside_the_new() {
        let kept = |n: i64| Kept {
            name: format!("b{n}"),
            scheduled_for: n * 60,
            path: format!("p/b{n}"),
        };
        let pruned = to_prune(vec![kept(1), kept(3), kept(2)], 2);
        let names: Vec<_> = pruned.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["b2", "b1"]);
        assert!(to_prune(vec![kept(1)], 2).is_empty());
        assert_eq!(to_prune(vec![kept(1)], 1).len(), 1);
    }
}
