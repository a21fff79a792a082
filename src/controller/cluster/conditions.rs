//! The cluster's conditions: their types, how one is built (keeping its transition time while
//! its status stays), and the questions the steps ask of the conditions a cluster already has.
//! Pure; the lowest module of the status step, so any step can name a condition type without
//! reaching into the status computation.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::ValkeyCluster;

/// Condition type: the Secret `spec.tls.secretRef` names is a usable certificate.
pub const TLS_CERTIFICATE_VALID: &str = "TlsCertificateValid";
/// Condition type: every running member serves the current certificate.
pub const TLS_CERTIFICATE_SERVED: &str = "TlsCertificateServed";

pub fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    previous: &[Condition],
) -> Condition {
    let status = if ok { "True" } else { "False" };
    // Keep the transition time while the status stays the same.
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(k8s_openapi::jiff::Timestamp::now()));
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        observed_generation: generation,
        last_transition_time,
    }
}

pub fn previous_conditions(cluster: &ValkeyCluster) -> Vec<Condition> {
    cluster
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default()
}

/// Why a cluster is blocked: the condition that turns False (`ConfigResolved` for a broken
/// menu reference, `ObjectsOwned` for a name taken by someone else's object), its reason and
/// the message for status.
#[derive(Clone, Copy, Debug)]
pub struct Blocker<'a> {
    pub condition: &'a str,
    pub reason: &'a str,
    pub message: &'a str,
}

/// Condition type recording the ACL revision the members have loaded.
pub const ACL_APPLIED: &str = "AclApplied";

/// The `AclApplied` condition this cluster had before this reconcile.
pub fn previous_acl_condition(cluster: &ValkeyCluster) -> Option<Condition> {
    previous_conditions(cluster)
        .into_iter()
        .find(|c| c.type_ == ACL_APPLIED)
}

/// `status.conditions` is a list map keyed by `type`: the API server refuses a status with
/// two conditions of one type. Where steps added one twice, the last word stands, in the
/// place of the first.
pub fn one_per_type(conditions: &mut Vec<Condition>) {
    let mut kept: Vec<Condition> = Vec::with_capacity(conditions.len());
    for c in conditions.drain(..) {
        match kept.iter_mut().find(|k| k.type_ == c.type_) {
            Some(earlier) => *earlier = c,
            None => kept.push(c),
        }
    }
    *conditions = kept;
}

/// Whether the cluster's condition `type_` has `reason` now.
pub fn has_reason(cluster: &ValkeyCluster, type_: &str, reason: &str) -> bool {
    cluster.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.reason == reason)
    })
}

/// Condition type saying whether the cluster is degraded, and why (reasons: see
/// [`crate::plan::degraded_reason`], and `Blocked`).
pub const DEGRADED: &str = "Degraded";

/// Condition type: some member's Valkey exits before it ever joins (it is started again
/// with a growing backoff; see `controller::node::start`).
pub const MEMBERS_FAILING_TO_START: &str = "MembersFailingToStart";

/// Condition type: the steps the operator carries out change what it observes. False while it
/// carries out the same steps again and again without effect (see `repeats`); it clears by
/// itself once they take effect.
pub const STEPS_TAKING_EFFECT: &str = "StepsTakingEffect";

/// Condition `type_` for this round's status, keeping its transition time from the cluster's
/// previous status while its truth stays the same.
pub fn cluster_condition(
    cluster: &ValkeyCluster,
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
) -> Condition {
    let previous = previous_conditions(cluster);
    condition(
        type_,
        ok,
        reason,
        message,
        cluster.metadata.generation,
        &previous,
    )
}

/// Condition type saying shards lost their data (see [`Plan::lost_shards`]).
pub const DATA_LOST: &str = "DataLost";

/// Condition type (TLS clusters only): the certificate the members serve expires within 30
/// days, or has expired (Momento v0.9). The cluster's state does not change because of it.
pub const CERTIFICATE_EXPIRING_SOON: &str = "CertificateExpiringSoon";

/// The `DataLost` condition of `now` when it is new or names other shards than `before`'s:
/// each loss is told once as a Warning Event.
pub fn newly_lost<'a>(before: &[Condition], now: &'a [Condition]) -> Option<&'a Condition> {
    let lost = now.iter().find(|c| c.type_ == DATA_LOST)?;
    let told = before
        .iter()
        .any(|c| c.type_ == DATA_LOST && c.message == lost.message);
    (!told).then_some(lost)
}

/// `CertificateExpiringSoon` turned True (a Warning Event), or back to False from True (a
/// renewal: a Normal one), between `before` and `now`; None when it did not flip.
pub fn expiry_flip<'a>(
    before: &[Condition],
    now: &'a [Condition],
) -> Option<(bool, &'a Condition)> {
    let after = now.iter().find(|c| c.type_ == CERTIFICATE_EXPIRING_SOON)?;
    let was_true = before
        .iter()
        .find(|c| c.type_ == CERTIFICATE_EXPIRING_SOON)
        .map(|c| c.status == "True");
    match (was_true, after.status == "True") {
        (Some(false) | None, true) => Some((true, after)),
        (Some(true), false) => Some((false, after)),
        _ => None,
    }
}

/// The condition `type_` of `now` when it is False there and was not False `before` (True,
/// or absent): what deserves one Warning Event.
pub fn turned_false<'a>(
    before: &[Condition],
    now: &'a [Condition],
    type_: &str,
) -> Option<&'a Condition> {
    let is_false = |c: &&Condition| c.type_ == type_ && c.status == "False";
    let turned = now.iter().find(is_false)?;
    (!before.iter().any(|c| is_false(&c))).then_some(turned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_are_sent_one_per_type_the_last_word_standing() {
        let c = |type_: &str, reason: &str| Condition {
            type_: type_.into(),
            reason: reason.into(),
            status: "True".into(),
            message: String::new(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
            observed_generation: None,
        };
        let mut conditions = vec![c("Ready", "A"), c("Progressing", "B"), c("Ready", "C")];
        one_per_type(&mut conditions);
        let shown: Vec<(&str, &str)> = conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.reason.as_str()))
            .collect();
        assert_eq!(shown, [("Ready", "C"), ("Progressing", "B")]);
    }
}
