//! `kubectl valkey status`: a cluster's shards, members and progress, from what the operator
//! publishes (the ValkeyCluster's and ValkeyNodes' status, pods, Events). Pure: the caller
//! hands in what it read.

use std::collections::BTreeMap;
use std::fmt::Write;

use k8s_openapi::api::core::v1::{Event, Pod};
use serde::Serialize;

use crate::api::{ClusterNodeStatus, ValkeyCluster, ValkeyClusterStatus, ValkeyNode};
use crate::controller::cluster::observe::is_current;
use crate::driver::slots::even_ranges;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberRow {
    pub name: String,
    pub shard: i32,
    pub role: String,
    pub lifecycle: String,
    pub version: String,
    pub node: String,
    pub zone: String,
    pub ready: bool,
    /// Runs the desired spec (`None`: the menu does not resolve, unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current: Option<bool>,
    /// Replication offset lag behind the primary in bytes (replicas; from the cluster's status).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag: Option<i64>,
    /// Slots a primary serves, as Valkey reports them (from the cluster's status).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slots: Option<String>,
    /// Its volume claim and the size it was created with (members of a config with storage).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardRow {
    pub shard: i32,
    /// The slots the shard owns once the split over `spec.shards` is even (`start-end`; none
    /// for a shard being drained).
    pub target_slots: String,
    /// The slots its primary serves now (`-` when none does).
    pub serving: String,
    pub members: Vec<MemberRow>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventRow {
    pub age: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    pub cluster: String,
    pub state: String,
    pub message: String,
    pub shards_wanted: i32,
    pub replicas_per_shard: i32,
    /// What members keep across the loss of a pod (the cluster's `status.persistence`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persistence: Option<String>,
    /// Clusters with `spec.autoscaling`: the range, the target, the last decision and why
    /// it holds, in one line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<String>,
    /// `type=status (reason): message` of each condition.
    pub conditions: Vec<String>,
    /// Members on the desired spec, of all members (a rollout in progress when lower).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<String>,
    pub shards: Vec<ShardRow>,
    pub events: Vec<EventRow>,
}

/// Everything `status` reads.
pub struct Inputs<'a> {
    pub cluster: &'a ValkeyCluster,
    pub members: &'a [ValkeyNode],
    pub pods: &'a [Pod],
    /// Kubernetes node name -> zone (`topology.kubernetes.io/zone`), where readable.
    pub zones: &'a BTreeMap<String, String>,
    pub events: &'a [Event],
    /// The desired spec hash, when the menu resolves.
    pub desired_hash: Option<&'a str>,
    /// Now, seconds since the epoch (event ages).
    pub now: i64,
}

fn event_time(e: &Event) -> i64 {
    e.event_time
        .as_ref()
        .map(|t| t.0.as_second())
        .or_else(|| e.last_timestamp.as_ref().map(|t| t.0.as_second()))
        .or_else(|| e.first_timestamp.as_ref().map(|t| t.0.as_second()))
        .or_else(|| {
            e.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_second())
        })
        .unwrap_or(0)
}

pub(crate) fn age(secs: i64) -> String {
    match secs.max(0) {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s => format!("{}h", s / 3600),
    }
}

/// How many of the most recent Events `status` shows.
pub const EVENTS_SHOWN: usize = 10;

/// The report: one row per member, grouped by shard, with the rollout's progress and the
/// latest Events.
pub fn report(inputs: &Inputs<'_>) -> StatusReport {
    let cluster = inputs.cluster;
    let status = cluster.status.clone().unwrap_or_default();
    let rows = member_rows(inputs, &status);
    StatusReport {
        cluster: format!(
            "{}/{}",
            cluster.metadata.namespace.clone().unwrap_or_default(),
            cluster.metadata.name.clone().unwrap_or_default()
        ),
        state: status
            .state
            .map(|s| format!("{s:?}"))
            .unwrap_or_else(|| "-".into()),
        message: status.message.clone().unwrap_or_default(),
        shards_wanted: cluster.target_shards(),
        replicas_per_shard: cluster.spec.replicas_per_shard,
        persistence: status.persistence.clone(),
        autoscaling: autoscaling_line(cluster),
        conditions: status
            .conditions
            .iter()
            .map(|c| format!("{}={} ({}): {}", c.type_, c.status, c.reason, c.message))
            .collect(),
        rollout: inputs.desired_hash.map(|_| rollout(&rows)),
        shards: shard_rows(cluster, &rows),
        events: recent_events(inputs),
    }
}

/// `shards 2..4, target 3; last Out 2 -> 3 (memory) at <time>; holding OutCooldown`.
fn autoscaling_line(cluster: &ValkeyCluster) -> Option<String> {
    let spec = cluster.spec.autoscaling.as_ref()?;
    let status = cluster
        .status
        .as_ref()
        .and_then(|s| s.autoscaling.clone())
        .unwrap_or_default();
    let mut line = format!(
        "shards {}..{}, target {}",
        spec.min_shards,
        spec.max_shards,
        cluster.target_shards()
    );
    if let Some(d) = &status.last_decision {
        let trigger = d
            .trigger
            .as_ref()
            .map(|t| format!(" ({t})"))
            .unwrap_or_default();
        line += &format!(
            "; last {} {} -> {}{trigger} at {}",
            d.direction, d.from, d.to, d.time
        );
    }
    if let Some(holding) = &status.holding {
        line += &format!("; holding {holding}");
    }
    Some(line)
}

/// One row per ValkeyNode: what the cluster's status publishes about it (role, lifecycle,
/// version, lag, slots), falling back to the node's own status, and where its pod runs.
fn member_rows(inputs: &Inputs<'_>, status: &ValkeyClusterStatus) -> Vec<MemberRow> {
    let pods: BTreeMap<String, &Pod> = inputs
        .pods
        .iter()
        .filter_map(|p| Some((p.metadata.name.clone()?, p)))
        .collect();
    let published: BTreeMap<&str, &ClusterNodeStatus> =
        status.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    inputs
        .members
        .iter()
        .map(|n| member_row(inputs, n, &pods, &published))
        .collect()
}

fn member_row(
    inputs: &Inputs<'_>,
    n: &ValkeyNode,
    pods: &BTreeMap<String, &Pod>,
    published: &BTreeMap<&str, &ClusterNodeStatus>,
) -> MemberRow {
    let name = n.metadata.name.clone().unwrap_or_default();
    let node_status = n.status.clone().unwrap_or_default();
    let seen = published.get(name.as_str());
    let pod = pods.get(node_status.pod.as_deref().unwrap_or(&name));
    let host = pod
        .and_then(|p| p.spec.as_ref()?.node_name.clone())
        .unwrap_or_default();
    let ready = pod
        .and_then(|p| p.status.as_ref()?.conditions.clone())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let role = seen
        .and_then(|s| s.role)
        .or(node_status.role)
        .map(|r| format!("{r:?}").to_lowercase())
        .unwrap_or_else(|| "-".into());
    let lifecycle = seen
        .and_then(|s| s.lifecycle)
        .or(node_status.lifecycle)
        .map(|l| format!("{l:?}"))
        .unwrap_or_else(|| "-".into());
    MemberRow {
        shard: n.spec.shard,
        role,
        lifecycle,
        version: seen
            .and_then(|s| s.version.clone())
            .unwrap_or_else(|| n.spec.version.clone()),
        zone: inputs
            .zones
            .get(&host)
            .cloned()
            .unwrap_or_else(|| "-".into()),
        node: if host.is_empty() { "-".into() } else { host },
        ready,
        current: inputs.desired_hash.map(|h| is_current(n, h)),
        lag: seen.and_then(|s| s.lag_bytes),
        slots: seen.and_then(|s| s.slots.clone()),
        volume: seen
            .and_then(|s| s.volume.clone())
            .or_else(|| crate::controller::node::build::volume_of(n, None)),
        name,
    }
}

/// Every shard the spec asks for and every shard a member still belongs to (one being
/// drained), with its target slots once the split is even and the slots it serves now.
fn shard_rows(cluster: &ValkeyCluster, rows: &[MemberRow]) -> Vec<ShardRow> {
    let targets = even_ranges(cluster.target_shards().max(0) as usize);
    let mut shard_ids: Vec<i32> = (0..cluster.target_shards().max(0)).collect();
    shard_ids.extend(rows.iter().map(|r| r.shard));
    shard_ids.sort_unstable();
    shard_ids.dedup();
    shard_ids
        .into_iter()
        .map(|s| ShardRow {
            shard: s,
            target_slots: targets
                .get(s as usize)
                .map(|r| format!("{}-{}", r.start(), r.end()))
                .unwrap_or_else(|| "none (draining)".into()),
            serving: rows
                .iter()
                .filter(|r| r.shard == s)
                .find_map(|r| r.slots.clone())
                .unwrap_or_else(|| "-".into()),
            members: rows.iter().filter(|r| r.shard == s).cloned().collect(),
        })
        .collect()
}

/// How many members run the desired spec (known only when the menu resolves).
fn rollout(rows: &[MemberRow]) -> String {
    let current = rows.iter().filter(|r| r.current == Some(true)).count();
    if current == rows.len() {
        format!("all {} members run the desired spec", rows.len())
    } else {
        format!(
            "{current} of {} members run the desired spec; {} to replace",
            rows.len(),
            rows.len() - current
        )
    }
}

/// The [`EVENTS_SHOWN`] most recent Events, oldest first.
fn recent_events(inputs: &Inputs<'_>) -> Vec<EventRow> {
    let mut events: Vec<&Event> = inputs.events.iter().collect();
    events.sort_by_key(|e| event_time(e));
    events
        .iter()
        .rev()
        .take(EVENTS_SHOWN)
        .rev()
        .map(|e| EventRow {
            age: age(inputs.now - event_time(e)),
            type_: e.type_.clone().unwrap_or_default(),
            reason: e.reason.clone().unwrap_or_default(),
            message: e.message.clone().unwrap_or_default(),
        })
        .collect()
}

pub fn text(r: &StatusReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "ValkeyCluster {}: {} ({} shard(s) x {} replica(s) wanted)",
        r.cluster, r.state, r.shards_wanted, r.replicas_per_shard
    );
    if !r.message.is_empty() {
        let _ = writeln!(out, "message: {}", r.message);
    }
    if let Some(rollout) = &r.rollout {
        let _ = writeln!(out, "rollout: {rollout}");
    }
    if let Some(persistence) = &r.persistence {
        let _ = writeln!(out, "persistence: {persistence}");
    }
    if let Some(autoscaling) = &r.autoscaling {
        let _ = writeln!(out, "autoscaling: {autoscaling}");
    }
    for c in &r.conditions {
        let _ = writeln!(out, "  {c}");
    }
    for s in &r.shards {
        let _ = writeln!(
            out,
            "\nshard {} (serves {}; target slots {})",
            s.shard, s.serving, s.target_slots
        );
        let _ = writeln!(
            out,
            "  {:<28} {:<8} {:<9} {:<8} {:<6} {:<20} {:<12} {:<8} {:<8} VOLUME",
            "MEMBER", "ROLE", "LIFECYCLE", "VERSION", "READY", "NODE", "ZONE", "CURRENT", "LAG"
        );
        for m in &s.members {
            let _ = writeln!(
                out,
                "  {:<28} {:<8} {:<9} {:<8} {:<6} {:<20} {:<12} {:<8} {:<8} {}",
                m.name,
                m.role,
                m.lifecycle,
                m.version,
                m.ready,
                m.node,
                m.zone,
                m.current.map_or("?".into(), |c| c.to_string()),
                m.lag.map_or("-".into(), |l| l.to_string()),
                m.volume.as_deref().unwrap_or("-"),
            );
        }
    }
    out.push_str("\nevents:\n");
    if r.events.is_empty() {
        out.push_str("  (none)\n");
    }
    for e in &r.events {
        let _ = writeln!(
            out,
            "  {:<5} {:<8} {:<22} {}",
            e.age, e.type_, e.reason, e.message
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        ClusterNodeStatus, ClusterState, NodeRole, ValkeyClusterSpec, ValkeyClusterStatus,
        ZoneSpread,
    };
    use crate::controller::cluster::build;
    use crate::resolve::chain::tests::seed_menu;

    #[test]
    fn status_shows_members_progress_target_slots_and_the_last_events() {
        let mut cluster = ValkeyCluster::new(
            "c",
            ValkeyClusterSpec {
                config_ref: "standard".into(),
                shards: 2,
                replicas_per_shard: 0,
                acl: vec![],
                tls: None,
                placement: None,
                pod_annotations: Default::default(),
                autoscaling: None,
                backup: None,
                restore_from: None,
                external_access: None,
            },
        );
        cluster.metadata.namespace = Some("ns".into());
        cluster.metadata.uid = Some("u".into());
        cluster.status = Some(ValkeyClusterStatus {
            state: Some(ClusterState::Updating),
            message: Some(
                "scaling to 2 shard(s): 8192 slot(s) left to move from shard(s) 0 to shard(s) 1"
                    .into(),
            ),
            nodes: vec![
                ClusterNodeStatus {
                    name: "c-0-0".into(),
                    role: Some(NodeRole::Primary),
                    slots: Some("0-16383".into()),
                    ..Default::default()
                },
                ClusterNodeStatus {
                    name: "c-1-0".into(),
                    role: Some(NodeRole::Replica),
                    lag_bytes: Some(42),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        let resolved = crate::controller::cluster::resolve(&cluster, &seed_menu(), []).unwrap();
        let spec = build::desired_node_spec(&cluster, &resolved.config, ZoneSpread::BestEffort);
        let mut stale = spec.clone();
        stale.version = "8.1.4".into();
        let members = [
            build::node(&cluster, "c-0-0", 0, &spec).unwrap(),
            build::node(&cluster, "c-1-0", 1, &stale).unwrap(),
        ];
        let events: Vec<Event> = (0..12)
            .map(|i| Event {
                reason: Some(format!("R{i}")),
                message: Some(format!("event {i}")),
                type_: Some("Normal".into()),
                last_timestamp: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::from_second(1000 + i).unwrap(),
                )),
                ..Default::default()
            })
            .collect();
        let hash = build::spec_hash(&spec);
        let r = report(&Inputs {
            cluster: &cluster,
            members: &members,
            pods: &[],
            zones: &BTreeMap::new(),
            events: &events,
            desired_hash: Some(&hash),
            now: 1100,
        });
        assert_eq!(r.shards[0].target_slots, "0-8191");
        assert_eq!(r.shards[1].target_slots, "8192-16383");
        assert_eq!(
            r.shards[0].serving, "0-16383",
            "what Valkey reports, via status"
        );
        assert_eq!(r.shards[1].serving, "-");
        assert_eq!(r.shards[1].members[0].lag, Some(42));
        assert_eq!(r.shards[0].members[0].role, "primary");
        assert_eq!(r.shards[1].members[0].current, Some(false));
        assert_eq!(
            r.rollout.as_deref(),
            Some("1 of 2 members run the desired spec; 1 to replace")
        );
        assert_eq!(r.events.len(), EVENTS_SHOWN);
        assert_eq!(r.events.last().unwrap().reason, "R11");
        assert_eq!(r.events.last().unwrap().age, "89s");
        let out = text(&r);
        assert!(out.contains("8192 slot(s) left to move"), "{out}");
    }
}

#[cfg(test)]
mod autoscaling_tests {
    use super::*;
    use crate::api::autoscaling::{Autoscaling, AutoscalingStatus, ScalingDecision};
    use crate::api::{ValkeyClusterSpec, ValkeyClusterStatus};

    #[test]
    fn the_autoscaling_line_shows_range_target_last_decision_and_holding() {
        let mut cluster = ValkeyCluster::new(
            "c",
            ValkeyClusterSpec {
                config_ref: "standard".into(),
                shards: 2,
                replicas_per_shard: 1,
                acl: vec![],
                tls: None,
                placement: None,
                pod_annotations: Default::default(),
                autoscaling: None,
                backup: None,
                restore_from: None,
                external_access: None,
            },
        );
        assert_eq!(autoscaling_line(&cluster), None);
        cluster.spec.autoscaling = Some(
            serde_json::from_value::<Autoscaling>(
                serde_json::json!({"minShards": 2, "maxShards": 4}),
            )
            .unwrap(),
        );
        cluster.status = Some(ValkeyClusterStatus {
            autoscaling: Some(AutoscalingStatus {
                desired_shards: Some(3),
                holding: Some("OutCooldown".into()),
                last_decision: Some(ScalingDecision {
                    direction: "Out".into(),
                    from: 2,
                    to: 3,
                    trigger: Some("memory".into()),
                    time: "2026-12-05T10:00:00Z".into(),
                }),
                ..AutoscalingStatus::default()
            }),
            ..ValkeyClusterStatus::default()
        });
        assert_eq!(
            autoscaling_line(&cluster).unwrap(),
            "shards 2..4, target 3; last Out 2 -> 3 (memory) at 2026-12-05T10:00:00Z; holding OutCooldown"
        );
    }
}
