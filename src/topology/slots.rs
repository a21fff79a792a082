//! Hash-slot arithmetic (pure): ranges, even splits, rendering.
//!
//! A slot range is an inclusive `RangeInclusive<u16>`, the way Valkey prints it
//! (`0-5460`, or a single slot `42`).

use std::ops::RangeInclusive;

/// Number of hash slots in a Valkey cluster.
pub const SLOT_COUNT: u16 = 16384;
/// Highest slot number.
pub const MAX_SLOT: u16 = SLOT_COUNT - 1;

/// An inclusive range of hash slots.
pub type SlotRange = RangeInclusive<u16>;

/// Splits all 16384 slots into `shards` contiguous ranges in ascending order whose sizes
/// differ by at most one (the first `16384 % shards` ranges get the extra slot).
///
/// `shards == 0` gives no ranges; more than 16384 shards get one slot each for the first
/// 16384 (a range cannot be empty).
pub fn even_ranges(shards: usize) -> Vec<SlotRange> {
    let shards = shards.min(SLOT_COUNT as usize);
    if shards == 0 {
        return Vec::new();
    }
    let base = SLOT_COUNT as usize / shards;
    let extra = SLOT_COUNT as usize % shards;
    let mut start = 0usize;
    (0..shards)
        .map(|i| {
            let len = base + usize::from(i < extra);
            let range = start as u16..=(start + len - 1) as u16;
            start += len;
            range
        })
        .collect()
}

/// Number of slots in a range.
pub fn range_len(range: &SlotRange) -> usize {
    if range.is_empty() {
        0
    } else {
        usize::from(*range.end() - *range.start()) + 1
    }
}

/// Renders a range the way Valkey does: `a-b`, or `a` for a single slot.
pub fn format_range(range: &SlotRange) -> String {
    if range.start() == range.end() {
        range.start().to_string()
    } else {
        format!("{}-{}", range.start(), range.end())
    }
}

/// Parses `a-b` or `a` into a range; `None` if malformed, reversed or out of bounds.
pub fn parse_range(text: &str) -> Option<SlotRange> {
    let (start, end) = match text.split_once('-') {
        Some((a, b)) => (a.parse::<u16>().ok()?, b.parse::<u16>().ok()?),
        None => {
            let s = text.parse::<u16>().ok()?;
            (s, s)
        }
    };
    (start <= end && end <= MAX_SLOT).then_some(start..=end)
}

/// Merges ranges into a sorted list of disjoint, non-adjacent ranges.
pub fn normalize(ranges: impl IntoIterator<Item = SlotRange>) -> Vec<SlotRange> {
    let mut sorted: Vec<SlotRange> = ranges.into_iter().filter(|r| !r.is_empty()).collect();
    sorted.sort_by_key(|r| (*r.start(), *r.end()));
    let mut out: Vec<SlotRange> = Vec::with_capacity(sorted.len());
    for r in sorted {
        match out.last_mut() {
            Some(last) if u32::from(*r.start()) <= u32::from(*last.end()) + 1 => {
                if r.end() > last.end() {
                    *last = *last.start()..=*r.end();
                }
            }
            _ => out.push(r),
        }
    }
    out
}

/// Total number of distinct slots covered by the ranges.
pub fn count_slots(ranges: impl IntoIterator<Item = SlotRange>) -> usize {
    normalize(ranges).iter().map(range_len).sum()
}

/// The parts of `range` not covered by any of `owned`.
pub fn subtract(range: &SlotRange, owned: &[SlotRange]) -> Vec<SlotRange> {
    let mut free = Vec::new();
    let mut start = *range.start();
    let end = *range.end();
    let mut sorted: Vec<&SlotRange> = owned
        .iter()
        .filter(|o| o.end() >= range.start() && o.start() <= range.end())
        .collect();
    sorted.sort_by_key(|r| *r.start());
    for o in sorted {
        if *o.start() > start {
            free.push(start..=(*o.start() - 1).min(end));
        }
        if *o.end() >= end {
            return free;
        }
        start = start.max(*o.end() + 1);
    }
    if start <= end {
        free.push(start..=end);
    }
    free
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn three_shards_split_evenly() {
        // The first 16384 % 3 = 1 range takes the extra slot.
        assert_eq!(even_ranges(3), vec![0..=5461, 5462..=10922, 10923..=16383]);
        assert_eq!(count_slots(even_ranges(3)), 16384);
    }

    #[test]
    fn edge_shard_counts() {
        assert!(even_ranges(0).is_empty());
        assert_eq!(even_ranges(1), vec![0..=16383]);
        assert_eq!(even_ranges(16384).len(), 16384);
        assert_eq!(even_ranges(20000).len(), 16384);
        assert_eq!(even_ranges(16384)[16383], 16383..=16383);
    }

    #[test]
    fn parse_and_format_round_trip() {
        assert_eq!(parse_range("0-5460"), Some(0..=5460));
        assert_eq!(parse_range("42"), Some(42..=42));
        assert_eq!(parse_range("5-4"), None);
        assert_eq!(parse_range("0-16384"), None);
        assert_eq!(parse_range("x"), None);
        assert_eq!(format_range(&(0..=5460)), "0-5460");
        assert_eq!(format_range(&(7..=7)), "7");
    }

    #[test]
    fn normalize_merges_overlapping_and_adjacent() {
        assert_eq!(
            normalize([10..=20, 0..=4, 5..=9, 15..=30, 40..=41]),
            vec![0..=30, 40..=41]
        );
        assert_eq!(count_slots([0..=9, 5..=14]), 15);
    }

    proptest! {
        #[test]
        fn even_ranges_cover_everything_once_and_evenly(shards in 1usize..=2000) {
            let ranges = even_ranges(shards);
            prop_assert_eq!(ranges.len(), shards);
            // Contiguous, ascending, no overlap, all 16384 covered.
            prop_assert_eq!(*ranges[0].start(), 0);
            prop_assert_eq!(*ranges[ranges.len() - 1].end(), MAX_SLOT);
            for pair in ranges.windows(2) {
                prop_assert_eq!(u32::from(*pair[0].end()) + 1, u32::from(*pair[1].start()));
            }
            prop_assert_eq!(ranges.iter().map(range_len).sum::<usize>(), SLOT_COUNT as usize);
            let sizes: Vec<usize> = ranges.iter().map(range_len).collect();
            let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            prop_assert!(max - min <= 1);
        }

        #[test]
        fn normalize_preserves_the_slot_set(raw in proptest::collection::vec((0u16..16384, 0u16..200), 0..30)) {
            let ranges: Vec<SlotRange> = raw.iter().map(|&(s, l)| s..=s.saturating_add(l).min(MAX_SLOT)).collect();
            let mut expected = std::collections::BTreeSet::new();
            for r in &ranges { expected.extend(r.clone()); }
            let merged = normalize(ranges);
            let got: std::collections::BTreeSet<u16> = merged.iter().flat_map(|r| r.clone()).collect();
            prop_assert_eq!(got, expected);
            for pair in merged.windows(2) {
                prop_assert!(u32::from(*pair[0].end()) + 1 < u32::from(*pair[1].start()));
            }
        }
    }
}
