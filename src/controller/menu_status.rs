//! `status.observedGeneration` of the menu kinds (ValkeyImage, ValkeyConfig, ValkeyRole): the
//! generation of the spec the operator's menu caches hold, and so the one every cluster using
//! the object is reconciled against (a menu change requeues them: `run.rs` `follow_menu`). A
//! platform team that edited a config sees the operator has taken the edit once
//! `observedGeneration` equals `metadata.generation`.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::{info, warn};

use crate::api::{ValkeyConfig, ValkeyImage, ValkeyRole};
use crate::controller::{Context, until_ready};

/// How often the menu is looked at (from the watch caches: no API read unless behind).
const LOOK_EVERY: Duration = Duration::from_secs(2);

/// The objects whose recorded `observedGeneration` is not their generation, with the
/// generation to record. Objects being deleted are left alone (nothing uses their new spec).
pub fn behind<K: Resource>(
    objects: &[Arc<K>],
    observed: impl Fn(&K) -> Option<i64>,
) -> Vec<(String, i64)> {
    objects
        .iter()
        .filter(|o| o.meta().deletion_timestamp.is_none())
        .filter_map(|o| {
            let generation = o.meta().generation?;
            (observed(o) != Some(generation)).then(|| (o.name_any(), generation))
        })
        .collect()
}

/// Runs until shutdown (only while this replica leads: it is started with the controllers).
pub async fn publish_observed_generations(ctx: Arc<Context>) {
    let menu = &ctx.menu;
    if !until_ready(&menu.images).await
        || !until_ready(&menu.configs).await
        || !until_ready(&menu.roles).await
    {
        warn!("menu observedGeneration not published: the menu caches never filled");
        return;
    }
    info!("menu observedGeneration publishing running");
    loop {
        record(&ctx, &menu.images, |i: &ValkeyImage| {
            i.status.as_ref()?.observed_generation
        })
        .await;
        record(&ctx, &menu.configs, |c: &ValkeyConfig| {
            c.status.as_ref()?.observed_generation
        })
        .await;
        record(&ctx, &menu.roles, |r: &ValkeyRole| {
            r.status.as_ref()?.observed_generation
        })
        .await;
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// Writes the generation the cache holds onto each object of one kind that is behind.
async fn record<K>(ctx: &Context, store: &Store<K>, observed: impl Fn(&K) -> Option<i64>)
where
    K: Resource<Scope = kube::core::ClusterResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let stale = behind(&store.state(), observed);
    if stale.is_empty() || ctx.confirm_leading().await.is_err() {
        return;
    }
    let api: Api<K> = Api::all(ctx.client.clone());
    for (name, generation) in stale {
        let patch = json!({"status": {"observedGeneration": generation}});
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            // Gone meanwhile: nothing to record.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                warn!(kind = %K::kind(&()), %name, error = %e, "cannot record observedGeneration; trying again shortly")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ValkeyImageSpec, ValkeyImageStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn image(name: &str, generation: Option<i64>, observed: Option<i64>) -> Arc<ValkeyImage> {
        let mut image = ValkeyImage::new(
            name,
            ValkeyImageSpec {
                image_pull_secrets: vec![],
                repository: "valkey/valkey".into(),
                tag: "9.0.1".into(),
                digest: None,
                version: "9.0.1".into(),
            },
        );
        image.metadata.generation = generation;
        image.status = observed.map(|g| ValkeyImageStatus {
            observed_generation: Some(g),
        });
        Arc::new(image)
    }

    #[test]
    fn objects_whose_generation_is_not_recorded_are_behind() {
        let mut deleting = (*image("deleting", Some(2), Some(1))).clone();
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        let images = [
            image("new", Some(1), None),
            image("edited", Some(3), Some(2)),
            image("current", Some(2), Some(2)),
            image("no-generation", None, None),
            Arc::new(deleting),
        ];
        assert_eq!(
            behind(&images, |i| i.status.as_ref()?.observed_generation),
            vec![("new".to_string(), 1), ("edited".to_string(), 3)]
        );
    }
}
