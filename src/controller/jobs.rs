//! What backup and restore Jobs share: the image they run (the operator's own), their
//! restricted pod, environment from values and Secret references, and how their end is read
//! (the termination message; a pod that cannot even start is an end too).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{
    Job, JobSpec, PodFailurePolicy, PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EnvVar, EnvVarSource, Pod, PodSecurityContext, PodSpec,
    ResourceRequirements, SeccompProfile, SecretKeySelector, SecretVolumeSource, SecurityContext,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PropagationPolicy};

use crate::cache::{NamespacedKind, controller_for};
use crate::controller::{Context, Error};

/// The image backup Jobs run, when set; the operator's own image otherwise.
pub const ENV_BACKUP_IMAGE: &str = "BACKUP_JOB_IMAGE";
/// A finished Job is kept this long for its logs.
pub const JOB_TTL_SECONDS: i32 = 24 * 3600;
/// A Job still copying after this long is stopped (Failed).
pub const JOB_DEADLINE_SECONDS: i64 = 6 * 3600;
/// A copy streams (two 8 MiB parts in flight and one read buffer), whatever the shard's size.
pub const JOB_MEMORY_LIMIT: &str = "128Mi";
pub const CA_MOUNT: &str = "/etc/valkey-backup/ca";

/// How a Job ended, once it has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobEnd {
    /// Its pod ended: the termination message (the outcome, as JSON) and the reason.
    Ended(Vec<(String, String)>),
    /// It will never run: its pod cannot start (a Secret or key it names is missing, its image
    /// cannot be pulled). The Job is deleted; this says why.
    CannotStart(String),
}

/// Waiting reasons that do not pass by themselves: the pod never starts.
const STUCK_REASONS: &[&str] = &[
    "CreateContainerConfigError",
    "CreateContainerError",
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
];

/// A pod of a Job that cannot start, and why (the kubelet's own message).
pub fn cannot_start(pod: &Pod) -> Option<String> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().find_map(|s| {
        let waiting = s.state.as_ref()?.waiting.as_ref()?;
        let reason = waiting.reason.as_deref()?;
        STUCK_REASONS.contains(&reason).then(|| {
            format!(
                "its pod cannot start ({reason}: {})",
                waiting.message.as_deref().unwrap_or("no message")
            )
        })
    })
}

/// `None` while `job` runs; how it ended otherwise. A Job whose pod cannot start is deleted
/// (with its pod) here, so the backup or restore fails at once instead of after the Job's
/// deadline.
pub async fn job_end(ctx: &Context, job: &Job) -> Result<Option<JobEnd>, Error> {
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), &ctx.operator_namespace);
    let name = kube::ResourceExt::name_any(job);
    let selector = format!("batch.kubernetes.io/job-name={name}");
    let listed = pods.list(&ListParams::default().labels(&selector)).await?;
    if !finished(job) {
        let Some(why) = listed.iter().find_map(cannot_start) else {
            return Ok(None);
        };
        let jobs = Api::<Job>::namespaced(ctx.client.clone(), &ctx.operator_namespace);
        let background = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..Default::default()
        };
        jobs.delete(&name, &background).await?;
        return Ok(Some(JobEnd::CannotStart(why)));
    }
    // A pod that succeeded speaks for the Job: one replaced after a disruption may have left a
    // failure behind.
    let mut pods: Vec<&Pod> = listed.iter().collect();
    pods.sort_by_key(|pod| !succeeded(pod));
    let messages = pods.into_iter().filter_map(termination).collect();
    Ok(Some(JobEnd::Ended(messages)))
}

/// What a Job's pod left in its termination message (`T`, from JSON) once the Job has ended;
/// `Err` says why there is none (the pod could not start, was killed, ...). `None` while it runs.
pub async fn job_outcome<T: serde::de::DeserializeOwned>(
    ctx: &Context,
    job: &Job,
) -> Result<Option<Result<T, String>>, Error> {
    let Some(end) = job_end(ctx, job).await? else {
        return Ok(None);
    };
    let messages = match end {
        JobEnd::Ended(messages) => messages,
        JobEnd::CannotStart(why) => vec![(String::new(), why)],
    };
    if let Some(outcome) = messages
        .iter()
        .find_map(|(message, _)| serde_json::from_str::<T>(message).ok())
    {
        return Ok(Some(Ok(outcome)));
    }
    let why = messages
        .first()
        .map_or_else(|| job_end_reason(job), |(_, reason)| reason.clone());
    Ok(Some(Err(format!(
        "the Job {} ended without an outcome: {why}",
        kube::ResourceExt::name_any(job)
    ))))
}

/// The cluster's members as status lists them, and their pods' IPs by pod name: what a Job's
/// plan addresses them by.
pub async fn members_and_ips(
    ctx: &Context,
    cluster: &crate::api::ValkeyCluster,
) -> Result<(Vec<crate::api::ClusterNodeStatus>, BTreeMap<String, String>), Error> {
    use kube::ResourceExt;
    let namespace = cluster.namespace().unwrap_or_default();
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), &namespace);
    let selector = crate::controller::names::selector_string(
        &crate::controller::names::member_selector(&cluster.name_any()),
    );
    let mut ips = BTreeMap::new();
    for pod in pods.list(&ListParams::default().labels(&selector)).await? {
        if let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) {
            ips.insert(pod.name_any(), ip);
        }
    }
    let nodes = cluster
        .status
        .as_ref()
        .map(|s| s.nodes.clone())
        .unwrap_or_default();
    Ok((nodes, ips))
}

/// How long to wait before looking at a running Job again (its watch wakes the controller
/// when it ends; a pod stuck before start changes no Job, so this finds it).
pub const RUNNING_JOB_LOOK: Duration = Duration::from_secs(15);

/// What backup Jobs run: the exact image of the operator's own pod (`POD_NAME` in its
/// namespace), by digest where the runtime reports one (a moving tag such as `dev` or `latest`
/// could start another binary), with the pod's image pull Secrets; [`ENV_BACKUP_IMAGE`]
/// overrides the image.
pub async fn job_image(ctx: &Context) -> Result<JobImage, Error> {
    let pod_name = std::env::var("POD_NAME").ok();
    let pod = match &pod_name {
        Some(name) => {
            Api::<Pod>::namespaced(ctx.client.clone(), &ctx.operator_namespace)
                .get_opt(name)
                .await?
        }
        None => None,
    };
    let pull_secrets = pod
        .as_ref()
        .and_then(|p| p.spec.as_ref()?.image_pull_secrets.clone())
        .unwrap_or_default();
    if let Ok(image) = std::env::var(ENV_BACKUP_IMAGE) {
        return Ok(JobImage {
            image,
            pull_secrets,
        });
    }
    let by_digest = pod
        .as_ref()
        .and_then(|p| {
            p.status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .first()
                .cloned()
        })
        .map(|s| s.image_id)
        .filter(|id| id.contains("@sha256:"));
    let by_spec = pod
        .as_ref()
        .and_then(|p| p.spec.as_ref()?.containers.first()?.image.clone());
    let image = by_digest.or(by_spec).ok_or_else(|| {
        Error::Invalid(format!(
            "cannot tell the operator's image for backup Jobs (pod {:?} in {} not found): set {ENV_BACKUP_IMAGE}",
            pod_name, ctx.operator_namespace
        ))
    })?;
    Ok(JobImage {
        image,
        pull_secrets,
    })
}

/// The image backup Jobs run and the Secrets to pull it with.
pub struct JobImage {
    pub image: String,
    pub pull_secrets: Vec<k8s_openapi::api::core::v1::LocalObjectReference>,
}

pub fn value_env(name: &str, value: String) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value),
        ..Default::default()
    }
}

pub fn secret_env(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.into(),
                key: key.into(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The location's CA Secret, mounted read-only.
pub fn ca_volume(secret: &str) -> (Vec<Volume>, Vec<VolumeMount>) {
    let volume = Volume {
        name: "ca".into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mount = VolumeMount {
        name: "ca".into(),
        mount_path: CA_MOUNT.into(),
        read_only: Some(true),
        ..Default::default()
    };
    (vec![volume], vec![mount])
}

/// The one container of a backup or restore Job: `valkey-operator backup <action>`.
pub fn job_container(
    action: &str,
    image: &str,
    env: Vec<EnvVar>,
    mounts: Vec<VolumeMount>,
) -> Container {
    let quantity = |q: &str| Quantity(q.into());
    Container {
        name: action.into(),
        image: Some(image.into()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec![
            "valkey-operator".into(),
            "backup".into(),
            action.into(),
        ]),
        env: Some(env),
        volume_mounts: Some(mounts),
        // The copy holds two 8 MiB parts in flight and one read buffer.
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".into(), quantity("100m")),
                ("memory".into(), quantity("64Mi")),
            ])),
            limits: Some(BTreeMap::from([(
                "memory".into(),
                quantity(JOB_MEMORY_LIMIT),
            )])),
            ..Default::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The spec of a backup or restore Job: one pod, not retried when the copy itself fails (that
/// is the backup's or restore's outcome, reported as such), but replaced when the pod was taken
/// away from under it (`kubectl drain`, an eviction, a preemption, node pressure: the pod's
/// `DisruptionTarget` condition), so routine maintenance never fails a copy. A replacement
/// starts the copy over at the same path.
pub fn copy_job_spec(labels: BTreeMap<String, String>, pod: PodSpec) -> JobSpec {
    JobSpec {
        backoff_limit: Some(0),
        pod_failure_policy: Some(PodFailurePolicy {
            rules: vec![PodFailurePolicyRule {
                action: "Ignore".into(),
                on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                    type_: "DisruptionTarget".into(),
                    status: "True".into(),
                }]),
                on_exit_codes: None,
            }],
        }),
        active_deadline_seconds: Some(JOB_DEADLINE_SECONDS),
        ttl_seconds_after_finished: Some(JOB_TTL_SECONDS),
        template: k8s_openapi::api::core::v1::PodTemplateSpec {
            metadata: Some(kube::api::ObjectMeta {
                labels: Some(labels),
                ..Default::default()
            }),
            spec: Some(pod),
        },
        ..Default::default()
    }
}

/// Restricted Pod Security: non-root, default seccomp, no service account token.
pub fn restricted_pod(container: Container, volumes: Vec<Volume>) -> PodSpec {
    PodSpec {
        restart_policy: Some("Never".into()),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(65532),
            run_as_group: Some(65532),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        containers: vec![container],
        volumes: Some(volumes),
        ..Default::default()
    }
}

/// A pod's termination message and reason (`OOMKilled`, `Error`, ...), once it has ended.
pub fn termination(pod: &Pod) -> Option<(String, String)> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let terminated = statuses
        .iter()
        .find_map(|s| s.state.as_ref()?.terminated.clone())?;
    let reason = ended_why(terminated.reason.as_deref(), terminated.exit_code);
    Some((terminated.message.unwrap_or_default(), reason))
}

fn succeeded(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
}

/// Why a Job's container ended without an outcome, for a person: a kill says what killed it.
pub fn ended_why(reason: Option<&str>, exit_code: i32) -> String {
    match (reason, exit_code) {
        (Some("OOMKilled"), _) => format!(
            "its container was OOM-killed (over its {JOB_MEMORY_LIMIT} memory limit; exit code {exit_code})"
        ),
        (_, 137) => "its container was killed (SIGKILL, exit code 137)".into(),
        (_, 143) => "its container was stopped (SIGTERM, exit code 143)".into(),
        (Some(reason), code) => format!("{reason} (exit code {code})"),
        (None, code) => format!("exit code {code}"),
    }
}

/// The Job has ended: `Complete` or `Failed` (a pod that failed is not the end: one taken
/// away by a disruption is replaced, see [`copy_job_spec`]).
pub fn finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        })
}

pub fn job_end_reason(job: &Job) -> String {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Failed"))
        .and_then(|c| c.message.clone().or_else(|| c.reason.clone()))
        .unwrap_or_else(|| "its pod is gone".into())
}

/// A controller of every `K` in the namespaces the operator watches, also reconciling the
/// object `named_by` finds in the labels of a Job (in the operator's namespace, selected by
/// `selector`) whenever that Job changes: a backup or restore acts as soon as its Job ends.
pub fn controller_following_jobs<K: NamespacedKind>(
    ctx: &Context,
    selector: &str,
    named_by: impl Fn(
        k8s_openapi::api::batch::v1::Job,
    ) -> Option<kube::runtime::reflector::ObjectRef<K>>
    + Send
    + Sync
    + 'static,
) -> kube::runtime::Controller<K> {
    use kube::runtime::watcher::Config;
    let jobs = Api::namespaced(ctx.client.clone(), &ctx.operator_namespace);
    controller_for::<K>(
        &ctx.client,
        &ctx.settings.watch_namespaces,
        Config::default(),
    )
    .watches(jobs, Config::default().labels(selector), named_by)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateWaiting, ContainerStatus, PodStatus,
    };

    fn waiting(reason: &str, message: &str) -> Pod {
        Pod {
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: "backup".into(),
                    state: Some(ContainerState {
                        waiting: Some(ContainerStateWaiting {
                            reason: Some(reason.into()),
                            message: Some(message.into()),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_pod_that_cannot_start_is_an_end_and_says_why() {
        let why = cannot_start(&waiting(
            "CreateContainerConfigError",
            "secret \"valkey-op-x\" not found",
        ))
        .unwrap();
        assert!(why.contains("CreateContainerConfigError") && why.contains("not found"));
        assert!(cannot_start(&waiting("ImagePullBackOff", "no such image")).is_some());
    }

    fn job_with(conditions: &[(&str, &str)], failed: i32) -> Job {
        use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
        Job {
            status: Some(JobStatus {
                failed: Some(failed),
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(type_, status)| JobCondition {
                            type_: type_.to_string(),
                            status: status.to_string(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_job_has_ended_when_its_conditions_say_so_not_when_a_pod_failed() {
        assert!(!finished(&Job::default()));
        assert!(!finished(&job_with(&[], 1)));
        assert!(!finished(&job_with(&[("FailureTarget", "True")], 1)));
        assert!(!finished(&job_with(&[("Complete", "False")], 0)));
        assert!(finished(&job_with(&[("Complete", "True")], 0)));
        assert!(finished(&job_with(&[("Failed", "True")], 1)));
    }

    #[test]
    fn a_killed_copy_says_what_killed_it() {
        assert!(ended_why(Some("OOMKilled"), 137).contains("OOM-killed (over its 128Mi"));
        assert!(ended_why(Some("Error"), 137).contains("SIGKILL"));
        assert!(ended_why(Some("Error"), 143).contains("SIGTERM"));
        assert_eq!(ended_why(Some("Error"), 2), "Error (exit code 2)");
        assert_eq!(ended_why(None, 1), "exit code 1");
    }

    #[test]
    fn copy_jobs_replace_a_disrupted_pod_and_nothing_else() {
        let spec = copy_job_spec(BTreeMap::new(), PodSpec::default());
        assert_eq!(spec.backoff_limit, Some(0));
        let rules = spec.pod_failure_policy.unwrap().rules;
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].action, "Ignore");
        let on = rules[0].on_pod_conditions.clone().unwrap();
        assert_eq!(
            (on[0].type_.as_str(), on[0].status.as_str()),
            ("DisruptionTarget", "True")
        );
    }

    #[test]
    fn a_pod_that_is_still_starting_is_not() {
        assert_eq!(cannot_start(&waiting("ContainerCreating", "")), None);
        assert_eq!(cannot_start(&Pod::default()), None);
    }
}
