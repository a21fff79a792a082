//! Steps in words, for status and Events (people read them; nothing parses them).

use super::model::{MoveMethod, Step};
use crate::topology::FailoverMode;
use crate::topology::slots::{SlotRange, format_range};

/// Names, ranges or addresses shown before the rest are counted (`a, b, c and 7 more`).
const SHOWN: usize = 3;

impl Step {
    /// What the step does, with the Valkey command it sends where there is one.
    pub fn describe(&self) -> String {
        match self {
            Step::CreateNode { name, shard } => format!("create member {name} for shard {shard}"),
            Step::Meet { via, target } => {
                format!("introduce {target} to the cluster through {via} (CLUSTER MEET)")
            }
            Step::AssignSlots { member, ranges } => format!(
                "give {member} slots {} (CLUSTER ADDSLOTSRANGE)",
                ranges_in_words(ranges)
            ),
            Step::Replicate { member, primary } => {
                format!("make {member} a replica of node {primary} (CLUSTER REPLICATE)")
            }
            Step::Failover {
                member,
                shard,
                mode,
            } => {
                let command = match mode {
                    FailoverMode::Default => "CLUSTER FAILOVER",
                    FailoverMode::Force => "CLUSTER FAILOVER FORCE",
                    FailoverMode::Takeover => "CLUSTER FAILOVER TAKEOVER",
                };
                format!("promote {member} to primary of shard {shard} ({command})")
            }
            Step::MoveSlots {
                source,
                method,
                targets,
                ..
            } => {
                let how = match method {
                    MoveMethod::Atomic => "atomic slot migration",
                    MoveMethod::Keys => "key by key",
                };
                let slots: Vec<SlotRange> = targets.iter().flat_map(|t| t.ranges.clone()).collect();
                let to: Vec<String> = targets.iter().map(|t| t.member.to_string()).collect();
                format!(
                    "move slots {} from {source} to {} ({how})",
                    ranges_in_words(&slots),
                    listed(&to)
                )
            }
            Step::CloseSlots { member, slots } => {
                let slots: Vec<String> = slots.iter().map(u16::to_string).collect();
                format!(
                    "close slot(s) {} left open on {member} toward a node that is gone (CLUSTER SETSLOT STABLE)",
                    listed(&slots)
                )
            }
            Step::CancelSlotMigrations { member } => format!(
                "cancel the stalled slot migration on {member} (CLUSTER CANCELSLOTMIGRATIONS)"
            ),
            Step::MarkActive { names } => format!("mark {} Active", listed(names)),
            Step::MarkLeaving { names } => format!("mark {} Leaving (retire)", listed(names)),
            Step::SetConfigEpoch { member, epoch } => {
                format!("give {member} config epoch {epoch} (CLUSTER SET-CONFIG-EPOCH)")
            }
            Step::Forget { via, node } => {
                format!("make {via} forget node {node} (CLUSTER FORGET)")
            }
            Step::DeleteNode { name } => format!("delete the retired member {name}"),
        }
    }
}

/// A plan's steps in words: the first, and how many more there are.
pub fn describe_steps(steps: &[Step]) -> String {
    match steps {
        [] => "nothing".to_string(),
        [only] => only.describe(),
        [first, rest @ ..] => format!("{} and {} more step(s)", first.describe(), rest.len()),
    }
}

fn ranges_in_words(ranges: &[SlotRange]) -> String {
    let shown: Vec<String> = ranges.iter().map(format_range).collect();
    listed(&shown)
}

/// `a`, `a, b`, or `a, b, c and 7 more`.
fn listed(items: &[String]) -> String {
    if items.len() <= SHOWN + 1 {
        return items.join(", ");
    }
    format!(
        "{} and {} more",
        items[..SHOWN].join(", "),
        items.len() - SHOWN
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::MoveTarget;
    use crate::topology::{MemberAddr, NodeId};

    fn addr(last: u8) -> MemberAddr {
        MemberAddr::new(format!("10.0.0.{last}"), 6379)
    }

    #[test]
    fn a_step_is_described_with_its_members_and_the_command_it_sends() {
        let meet = Step::Meet {
            via: addr(1),
            target: addr(2),
        };
        assert_eq!(
            meet.describe(),
            "introduce 10.0.0.2:6379 to the cluster through 10.0.0.1:6379 (CLUSTER MEET)"
        );
        let takeover = Step::Failover {
            member: addr(3),
            shard: 2,
            mode: FailoverMode::Takeover,
        };
        assert_eq!(
            takeover.describe(),
            "promote 10.0.0.3:6379 to primary of shard 2 (CLUSTER FAILOVER TAKEOVER)"
        );
        let replicate = Step::Replicate {
            member: addr(4),
            primary: NodeId("ab12".into()),
        };
        assert_eq!(
            replicate.describe(),
            "make 10.0.0.4:6379 a replica of node ab12 (CLUSTER REPLICATE)"
        );
    }

    #[test]
    fn long_lists_are_cut_to_the_first_few_and_a_count() {
        let names: Vec<String> = (0..10).map(|i| format!("c-{i}-0")).collect();
        assert_eq!(
            Step::MarkActive {
                names: names[..4].to_vec()
            }
            .describe(),
            "mark c-0-0, c-1-0, c-2-0, c-3-0 Active"
        );
        assert_eq!(
            Step::MarkLeaving { names }.describe(),
            "mark c-0-0, c-1-0, c-2-0 and 7 more Leaving (retire)"
        );
        let assign = Step::AssignSlots {
            member: addr(1),
            ranges: vec![0..=99, 200..=200],
        };
        assert_eq!(
            assign.describe(),
            "give 10.0.0.1:6379 slots 0-99, 200 (CLUSTER ADDSLOTSRANGE)"
        );
        let moves = Step::MoveSlots {
            source: addr(1),
            source_id: NodeId("a".into()),
            method: MoveMethod::Atomic,
            targets: vec![MoveTarget {
                member: addr(2),
                id: NodeId("b".into()),
                ranges: (0..6).map(|i| i * 10..=i * 10 + 1).collect(),
            }],
            primaries: vec![],
        };
        assert_eq!(
            moves.describe(),
            "move slots 0-1, 10-11, 20-21 and 3 more from 10.0.0.1:6379 to 10.0.0.2:6379 (atomic slot migration)"
        );
    }

    #[test]
    fn a_plan_is_described_by_its_first_step_and_a_count_of_the_rest() {
        let create = |i: usize| Step::CreateNode {
            name: format!("c-{i}-0"),
            shard: i,
        };
        assert_eq!(describe_steps(&[]), "nothing");
        assert_eq!(
            describe_steps(&[create(0)]),
            "create member c-0-0 for shard 0"
        );
        assert_eq!(
            describe_steps(&[create(0), create(1), create(2)]),
            "create member c-0-0 for shard 0 and 2 more step(s)"
        );
    }
}
