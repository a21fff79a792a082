//! ValkeyImage deletion protection (Momento v0.9, `../shared/spec/MOMENTO-V09.md` section 9):
//! an image some ValkeyConfig names in `spec.imageRef` carries [`IMAGE_IN_USE_FINALIZER`], so a
//! `kubectl delete` only marks it; the finalizer goes once no config names it. Only a direct
//! `imageRef` counts (a config inheriting through `baseRef` depends on its base, which is
//! protected by naming the image itself). An unreferenced image has no finalizer: deleting it
//! is immediate.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

use crate::api::{ValkeyConfig, ValkeyImage};
use crate::controller::{Context, Error, until_ready};

pub use crate::api::image::IMAGE_IN_USE_FINALIZER;

/// How often the menu is looked at (from the watch caches: no API read).
const LOOK_EVERY: Duration = Duration::from_secs(2);

/// A finalizer to add to or remove from one image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Protection {
    Protect(String),
    Release(String),
}

/// What to change so that exactly the images named by a config's `imageRef` carry the
/// finalizer. A terminating image is never given one (it could not be added anyway), and the
/// finalizer stays on a terminating image as long as a config names it: that is the protection.
pub fn protection_changes(images: &[&ValkeyImage], configs: &[&ValkeyConfig]) -> Vec<Protection> {
    let named: BTreeSet<&str> = configs
        .iter()
        .filter_map(|c| c.spec.image_ref.as_deref())
        .collect();
    images
        .iter()
        .filter_map(|image| {
            let name = image.name_any();
            let protected = image
                .finalizers()
                .iter()
                .any(|f| f == IMAGE_IN_USE_FINALIZER);
            let in_use = named.contains(name.as_str());
            let deleting = image.meta().deletion_timestamp.is_some();
            match (in_use, protected) {
                (true, false) if !deleting => Some(Protection::Protect(name)),
                (false, true) => Some(Protection::Release(name)),
                _ => None,
            }
        })
        .collect()
}

/// Runs until shutdown (only while this replica leads: it is started with the controllers).
pub async fn protect_images(ctx: Arc<Context>) {
    let menu = &ctx.menu;
    if !until_ready(&menu.images).await || !until_ready(&menu.configs).await {
        warn!("image deletion protection not started: the menu caches never filled");
        return;
    }
    info!("image deletion protection running");
    let api: Api<ValkeyImage> = Api::all(ctx.client.clone());
    loop {
        let images = menu.images.state();
        let configs = menu.configs.state();
        let changes = protection_changes(
            &images.iter().map(Arc::as_ref).collect::<Vec<_>>(),
            &configs.iter().map(Arc::as_ref).collect::<Vec<_>>(),
        );
        for change in changes {
            if let Err(e) = apply(&ctx, &api, &images, &change).await {
                warn!(error = %e, ?change, "cannot change the image-in-use finalizer; trying again shortly");
            }
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// Sets the image's finalizers, guarded by the resourceVersion seen (a concurrent change of
/// its finalizers makes this one fail and the next look decide again).
async fn apply(
    ctx: &Context,
    api: &Api<ValkeyImage>,
    images: &[Arc<ValkeyImage>],
    change: &Protection,
) -> Result<(), Error> {
    let (name, protect) = match change {
        Protection::Protect(name) => (name, true),
        Protection::Release(name) => (name, false),
    };
    let Some(image) = images.iter().find(|i| &i.name_any() == name) else {
        return Ok(());
    };
    let mut finalizers: Vec<String> = image
        .finalizers()
        .iter()
        .filter(|f| *f != IMAGE_IN_USE_FINALIZER)
        .cloned()
        .collect();
    if protect {
        finalizers.push(IMAGE_IN_USE_FINALIZER.to_string());
    }
    ctx.confirm_leading().await?;
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": image.resource_version(),
    }});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => {
            info!(image = %name, protect, "image-in-use finalizer {}", if protect { "added" } else { "removed" });
            Ok(())
        }
        // Gone, or changed since the cache saw it: the next look decides again.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::api::{ValkeyConfigSpec, ValkeyImageSpec};

    fn image(name: &str, protected: bool, deleting: bool) -> ValkeyImage {
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
        if protected {
            image.metadata.finalizers = Some(vec![
                "example.com/other".into(),
                IMAGE_IN_USE_FINALIZER.into(),
            ]);
        }
        if deleting {
            image.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        }
        image
    }

    fn config(name: &str, image_ref: Option<&str>, base_ref: Option<&str>) -> ValkeyConfig {
        let spec: ValkeyConfigSpec =
            serde_json::from_value(json!({"imageRef": image_ref, "baseRef": base_ref}))
                .expect("a config spec");
        ValkeyConfig::new(name, spec)
    }

    #[test]
    fn exactly_the_images_a_config_names_are_protected() {
        let images = [
            image("named", false, false),
            image("named-protected", true, false),
            image("unnamed-protected", true, false),
            image("unnamed", false, false),
            image("only-inherited", false, false),
        ];
        let configs = [
            config("a", Some("named"), None),
            config("b", Some("named-protected"), None),
            // Through baseRef, only the base counts; the base names no image here.
            config("c", None, Some("only-inherited")),
        ];
        let changes = protection_changes(
            &images.iter().collect::<Vec<_>>(),
            &configs.iter().collect::<Vec<_>>(),
        );
        assert_eq!(
            changes,
            vec![
                Protection::Protect("named".into()),
                Protection::Release("unnamed-protected".into()),
            ]
        );
    }

    #[test]
    fn a_deleted_image_keeps_its_finalizer_while_named_and_loses_it_once_not() {
        let deleting = [image("old", true, true)];
        let images: Vec<&ValkeyImage> = deleting.iter().collect();
        let naming = [config("a", Some("old"), None)];
        assert!(protection_changes(&images, &naming.iter().collect::<Vec<_>>()).is_empty());
        assert_eq!(
            protection_changes(&images, &[]),
            vec![Protection::Release("old".into())]
        );
        // A terminating image that lost its finalizer another way is not given one again.
        let bare = [image("bare", false, true)];
        assert!(
            protection_changes(
                &bare.iter().collect::<Vec<_>>(),
                &[&config("a", Some("bare"), None)]
            )
            .is_empty()
        );
    }
}
