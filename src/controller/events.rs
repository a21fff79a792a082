//! The one Event publisher: every Event the operator writes (on a ValkeyCluster, a ValkeyBackup,
//! a restore's cluster) goes through [`publish`], with the context's single kube-runtime
//! `Recorder`, so notes are cut to the API's limit in one place and a failure to publish is
//! logged the same way everywhere (an Event is worth a try, never worth failing a reconcile).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use tracing::warn;

use crate::controller::Context;

/// The API server refuses an Event note over 1 KiB.
const NOTE_LIMIT: usize = 1000;

/// What the operator was doing when it wrote the Event. Events of one object with the same
/// type, reason and action are merged into one series that keeps its first note, so an action
/// that must show each occurrence (each ACL revision) carries what tells them apart.
pub const RECONCILE: &str = "Reconcile";

/// Publishes an Event of `type_` on `object`.
pub async fn publish<K: kube::Resource<DynamicType = ()>>(
    ctx: &Context,
    object: &K,
    type_: EventType,
    action: &str,
    reason: &str,
    note: &str,
) {
    send(ctx, object, None, (type_, action, reason), note).await;
}

/// A `Normal` Event on `object` about one of its parts, `related` (a cluster's member): the
/// related object is part of what makes two Events one series, so each member gets an Event of
/// its own rather than a count on the first member's.
pub async fn normal_about<K: kube::Resource<DynamicType = ()>>(
    ctx: &Context,
    object: &K,
    related: ObjectReference,
    reason: &str,
    note: &str,
) {
    let what = (EventType::Normal, RECONCILE, reason);
    send(ctx, object, Some(related), what, note).await;
}

async fn send<K: kube::Resource<DynamicType = ()>>(
    ctx: &Context,
    object: &K,
    related: Option<ObjectReference>,
    (type_, action, reason): (EventType, &str, &str),
    note: &str,
) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(note.chars().take(NOTE_LIMIT).collect()),
        action: action.to_string(),
        secondary: related,
    };
    if let Err(error) = ctx.recorder.publish(&event, &object.object_ref(&())).await {
        warn!(%error, reason, action, "cannot publish event");
    }
}

/// A `Normal` Event of the reconcile.
pub async fn normal<K: kube::Resource<DynamicType = ()>>(
    ctx: &Context,
    object: &K,
    reason: &str,
    note: &str,
) {
    publish(ctx, object, EventType::Normal, RECONCILE, reason, note).await;
}

/// A `Warning` Event of the reconcile.
pub async fn warning<K: kube::Resource<DynamicType = ()>>(
    ctx: &Context,
    object: &K,
    reason: &str,
    note: &str,
) {
    publish(ctx, object, EventType::Warning, RECONCILE, reason, note).await;
}
