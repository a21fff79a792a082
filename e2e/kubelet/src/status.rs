//! Pod status as a real kubelet reports it, computed from our runtime view of the pod.
//! Pure (no I/O) so phase/condition rules are unit tested.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::envvars::API_HOST;

#[derive(Clone, Debug, PartialEq)]
pub enum CState {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started_at: Timestamp,
    },
    Terminated {
        exit_code: i32,
        signal: Option<i32>,
        reason: String,
        message: Option<String>,
        started_at: Option<Timestamp>,
        finished_at: Timestamp,
    },
}

impl CState {
    pub fn waiting(reason: &str, message: Option<String>) -> Self {
        CState::Waiting {
            reason: reason.into(),
            message,
        }
    }
    pub fn is_running(&self) -> bool {
        matches!(self, CState::Running { .. })
    }
    pub fn exit_code(&self) -> Option<i32> {
        match self {
            CState::Terminated { exit_code, .. } => Some(*exit_code),
            _ => None,
        }
    }

    fn to_k8s(&self) -> ContainerState {
        match self {
            CState::Waiting { reason, message } => ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.clone()),
                    message: message.clone(),
                }),
                ..Default::default()
            },
            CState::Running { started_at } => ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(Time(*started_at)),
                }),
                ..Default::default()
            },
            CState::Terminated {
                exit_code,
                signal,
                reason,
                message,
                started_at,
                finished_at,
            } => ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: *exit_code,
                    signal: *signal,
                    reason: Some(reason.clone()),
                    message: message.clone(),
                    started_at: started_at.map(Time),
                    finished_at: Some(Time(*finished_at)),
                    container_id: None,
                }),
                ..Default::default()
            },
        }
    }
}

/// What the kubelet knows about one container.
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerRt {
    pub name: String,
    pub image: String,
    pub state: CState,
    pub last_state: Option<CState>,
    pub restart_count: i32,
    pub ready: bool,
    /// Startup probe passed (or none) while running.
    pub started: bool,
    /// Increments per process start, used for a stable containerID.
    pub instance: u64,
}

impl ContainerRt {
    pub fn new(name: &str, image: &str) -> Self {
        Self {
            name: name.into(),
            image: image.into(),
            state: CState::waiting("ContainerCreating", None),
            last_state: None,
            restart_count: 0,
            ready: false,
            started: false,
            instance: 0,
        }
    }
}

/// What the kubelet knows about one pod.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodRt {
    pub sandbox_ready: bool,
    pub pod_ip: Option<String>,
    pub start_time: Option<Timestamp>,
    pub init: Vec<ContainerRt>,
    pub containers: Vec<ContainerRt>,
    /// All (non-sidecar) init containers completed.
    pub initialized: bool,
    /// The pod is finished for good (phase Succeeded/Failed decided).
    pub init_failed: bool,
    /// Previous condition statuses with their transition times.
    pub transitions: BTreeMap<String, (String, Timestamp)>,
}

pub fn restart_policy(spec: &PodSpec) -> &str {
    spec.restart_policy.as_deref().unwrap_or("Always")
}

/// Pod phase, following the kubelet's getPhase.
pub fn compute_phase(spec: &PodSpec, rt: &PodRt) -> &'static str {
    let policy = restart_policy(spec);
    if rt.init_failed {
        return "Failed";
    }
    if !rt.initialized {
        return "Pending";
    }
    let (mut pending, mut running, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for c in &rt.containers {
        match &c.state {
            CState::Running { .. } => running += 1,
            CState::Terminated { exit_code, .. } => {
                stopped += 1;
                if *exit_code == 0 {
                    succeeded += 1;
                }
            }
            CState::Waiting { .. } => {
                if matches!(c.last_state, Some(CState::Terminated { .. })) {
                    stopped += 1;
                } else {
                    pending += 1;
                }
            }
        }
    }
    let n = rt.containers.len();
    if pending > 0 {
        "Pending"
    } else if running > 0 {
        "Running"
    } else if stopped == n && n > 0 {
        match policy {
            "Always" => "Running",
            "OnFailure" if succeeded < n => "Running",
            _ if succeeded == n => "Succeeded",
            _ => "Failed",
        }
    } else {
        "Pending"
    }
}

/// QoS class from requests/limits.
pub fn qos_class(spec: &PodSpec) -> &'static str {
    let all: Vec<_> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in &all {
        let r = c.resources.as_ref();
        let req = r.and_then(|r| r.requests.clone()).unwrap_or_default();
        let lim = r.and_then(|r| r.limits.clone()).unwrap_or_default();
        if !req.is_empty() || !lim.is_empty() {
            any = true;
        }
        for res in ["cpu", "memory"] {
            match (lim.get(res), req.get(res)) {
                (Some(l), Some(q)) if l == q => {}
                (Some(_), None) => {} // requests default to limits
                _ => guaranteed = false,
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn container_status(c: &ContainerRt, pod_uid: &str) -> ContainerStatus {
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone(),
        image_id: format!("vk-image://{}", crate::images::normalize(&c.image)),
        container_id: (c.instance > 0).then(|| format!("vk://{pod_uid}/{}/{}", c.name, c.instance)),
        ready: c.ready,
        started: Some(c.started && c.state.is_running()),
        restart_count: c.restart_count,
        state: Some(c.state.to_k8s()),
        last_state: Some(
            c.last_state
                .as_ref()
                .map(|s| s.to_k8s())
                .unwrap_or_default(),
        ),
        ..Default::default()
    }
}

fn names_where(cs: &[ContainerRt], pred: impl Fn(&ContainerRt) -> bool) -> Vec<String> {
    cs.iter()
        .filter(|c| pred(c))
        .map(|c| c.name.clone())
        .collect()
}

/// The full status to publish. `rt.transitions` is updated so `lastTransitionTime` only
/// moves when a condition's status changes.
pub fn build_status(pod: &Pod, rt: &mut PodRt, now: Timestamp) -> PodStatus {
    let spec = pod.spec.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let generation = pod.metadata.generation;
    let phase = compute_phase(&spec, rt);

    let mut conds: Vec<(String, bool, Option<String>, Option<String>)> = Vec::new();
    conds.push((
        "PodReadyToStartContainers".into(),
        rt.sandbox_ready,
        None,
        None,
    ));
    let init_pending = names_where(&rt.init, |c| {
        !matches!(c.state, CState::Terminated { exit_code: 0, .. }) && !c.started
    });
    conds.push(if rt.initialized {
        ("Initialized".into(), true, None, None)
    } else {
        (
            "Initialized".into(),
            false,
            Some("ContainersNotInitialized".into()),
            Some(format!(
                "containers with incomplete status: [{}]",
                init_pending.join(" ")
            )),
        )
    });
    let terminal = phase == "Succeeded" || phase == "Failed";
    let unready = names_where(&rt.containers, |c| !c.ready);
    let ready = unready.is_empty() && rt.initialized && !terminal;
    let (reason, msg) = if ready {
        (None, None)
    } else if terminal {
        (Some("PodCompleted".to_string()), None)
    } else {
        (
            Some("ContainersNotReady".to_string()),
            Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
        )
    };
    conds.push(("ContainersReady".into(), ready, reason.clone(), msg.clone()));
    // Ready also waits for the pod's readiness gates (conditions other controllers set).
    let existing: Vec<PodCondition> = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let unmet_gates: Vec<String> = spec
        .readiness_gates
        .iter()
        .flatten()
        .map(|g| g.condition_type.clone())
        .filter(|t| !existing.iter().any(|c| &c.type_ == t && c.status == "True"))
        .collect();
    if ready && !unmet_gates.is_empty() {
        conds.push((
            "Ready".into(),
            false,
            Some("ReadinessGatesNotReady".into()),
            Some(format!(
                "corresponding condition of pod readiness gate \"{}\" does not exist.",
                unmet_gates.join("\", \"")
            )),
        ));
    } else {
        conds.push(("Ready".into(), ready, reason, msg));
    }

    let ours = [
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
    ];
    // Conditions owned by others (PodScheduled from the scheduler, DisruptionTarget from
    // the controller manager, readiness gates) are kept as they are: the merge patch
    // replaces the whole list.
    let mut conditions: Vec<PodCondition> = existing
        .into_iter()
        .filter(|c| !ours.contains(&c.type_.as_str()))
        .collect();
    for (t, ok, reason, message) in conds {
        let status = if ok { "True" } else { "False" }.to_string();
        let ts = match rt.transitions.get(&t) {
            Some((s, ts)) if *s == status => *ts,
            _ => {
                rt.transitions.insert(t.clone(), (status.clone(), now));
                now
            }
        };
        conditions.push(PodCondition {
            type_: t,
            status,
            reason,
            message,
            last_transition_time: Some(Time(ts)),
            last_probe_time: None,
            observed_generation: generation,
        });
    }

    let ip = rt.pod_ip.clone();
    PodStatus {
        phase: Some(phase.into()),
        conditions: Some(conditions),
        host_ip: Some(API_HOST.into()),
        host_ips: Some(vec![HostIP {
            ip: API_HOST.into(),
        }]),
        pod_ip: ip.clone(),
        pod_ips: ip.map(|ip| vec![PodIP { ip }]),
        start_time: rt.start_time.map(Time),
        qos_class: Some(qos_class(&spec).into()),
        observed_generation: generation,
        init_container_statuses: (!rt.init.is_empty())
            .then(|| rt.init.iter().map(|c| container_status(c, &uid)).collect()),
        container_statuses: Some(
            rt.containers
                .iter()
                .map(|c| container_status(c, &uid))
                .collect(),
        ),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn spec(policy: &str) -> PodSpec {
        PodSpec {
            restart_policy: Some(policy.into()),
            containers: vec![Container {
                name: "a".into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn term(code: i32) -> CState {
        CState::Terminated {
            exit_code: code,
            signal: None,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            message: None,
            started_at: None,
            finished_at: Timestamp::now(),
        }
    }

    fn rt_with(state: CState, last: Option<CState>) -> PodRt {
        let mut c = ContainerRt::new("a", "img");
        c.state = state;
        c.last_state = last;
        PodRt {
            initialized: true,
            sandbox_ready: true,
            containers: vec![c],
            ..Default::default()
        }
    }

    #[test]
    fn phases() {
        let now = Timestamp::now();
        assert_eq!(compute_phase(&spec("Always"), &PodRt::default()), "Pending");
        assert_eq!(
            compute_phase(
                &spec("Always"),
                &rt_with(CState::waiting("ErrImagePull", None), None)
            ),
            "Pending"
        );
        assert_eq!(
            compute_phase(
                &spec("Always"),
                &rt_with(CState::Running { started_at: now }, None)
            ),
            "Running"
        );
        assert_eq!(
            compute_phase(
                &spec("Always"),
                &rt_with(CState::waiting("CrashLoopBackOff", None), Some(term(1)))
            ),
            "Running"
        );
        assert_eq!(
            compute_phase(&spec("Never"), &rt_with(term(0), None)),
            "Succeeded"
        );
        assert_eq!(
            compute_phase(&spec("Never"), &rt_with(term(2), None)),
            "Failed"
        );
        assert_eq!(
            compute_phase(&spec("OnFailure"), &rt_with(term(0), None)),
            "Succeeded"
        );
        assert_eq!(
            compute_phase(&spec("OnFailure"), &rt_with(term(1), None)),
            "Running"
        );
        let failed = PodRt {
            init_failed: true,
            ..Default::default()
        };
        assert_eq!(compute_phase(&spec("Never"), &failed), "Failed");
    }

    #[test]
    fn qos() {
        let mut s = spec("Always");
        assert_eq!(qos_class(&s), "BestEffort");
        let q = |v: &str| Quantity(v.into());
        s.containers[0].resources = Some(ResourceRequirements {
            limits: Some(
                [
                    ("cpu".to_string(), q("1")),
                    ("memory".to_string(), q("1Gi")),
                ]
                .into(),
            ),
            ..Default::default()
        });
        assert_eq!(qos_class(&s), "Guaranteed");
        s.containers[0].resources = Some(ResourceRequirements {
            requests: Some([("cpu".to_string(), q("1"))].into()),
            ..Default::default()
        });
        assert_eq!(qos_class(&s), "Burstable");
    }

    #[test]
    fn conditions_keep_transition_times() {
        let pod = Pod {
            spec: Some(spec("Always")),
            ..Default::default()
        };
        let t0 = Timestamp::now();
        let mut rt = rt_with(CState::Running { started_at: t0 }, None);
        rt.pod_ip = Some("198.18.1.2".into());
        let s = build_status(&pod, &mut rt, t0);
        let ready = |s: &PodStatus| {
            s.conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == "Ready")
                .cloned()
                .unwrap()
        };
        assert_eq!(ready(&s).status, "False");
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("198.18.1.2"));
        let t1 = t0 + std::time::Duration::from_secs(5);
        rt.containers[0].ready = true;
        rt.containers[0].started = true;
        let s = build_status(&pod, &mut rt, t1);
        assert_eq!(ready(&s).status, "True");
        assert_eq!(ready(&s).last_transition_time.unwrap().0, t1);
        let s = build_status(&pod, &mut rt, t1 + std::time::Duration::from_secs(5));
        assert_eq!(ready(&s).last_transition_time.unwrap().0, t1);
        let cs = &s.container_statuses.unwrap()[0];
        assert!(cs.ready);
        assert_eq!(cs.started, Some(true));
    }

    #[test]
    fn keeps_foreign_conditions_and_honours_readiness_gates() {
        let mut sp = spec("Always");
        sp.readiness_gates = Some(vec![k8s_openapi::api::core::v1::PodReadinessGate {
            condition_type: "example.com/gate".into(),
        }]);
        let foreign = |t: &str, st: &str| PodCondition {
            type_: t.into(),
            status: st.into(),
            ..Default::default()
        };
        let mut pod = Pod {
            spec: Some(sp),
            status: Some(PodStatus {
                conditions: Some(vec![
                    foreign("PodScheduled", "True"),
                    foreign("DisruptionTarget", "True"),
                    foreign("Ready", "Unknown"),
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut rt = rt_with(
            CState::Running {
                started_at: Timestamp::now(),
            },
            None,
        );
        rt.containers[0].ready = true;
        let s = build_status(&pod, &mut rt, Timestamp::now());
        let conds = s.conditions.unwrap();
        let get = |t: &str| conds.iter().find(|c| c.type_ == t).unwrap().clone();
        assert_eq!(get("DisruptionTarget").status, "True");
        assert_eq!(get("PodScheduled").status, "True");
        assert_eq!(conds.iter().filter(|c| c.type_ == "Ready").count(), 1);
        assert_eq!(get("ContainersReady").status, "True");
        assert_eq!(get("Ready").status, "False");
        assert_eq!(
            get("Ready").reason.as_deref(),
            Some("ReadinessGatesNotReady")
        );
        pod.status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()
            .push(foreign("example.com/gate", "True"));
        let s = build_status(&pod, &mut rt, Timestamp::now());
        let ready = s
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
    }
}
