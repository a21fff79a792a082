//! Container environment: `env`, `envFrom`, downward API fields, and `$(VAR)` expansion,
//! following the real kubelet's precedence (image env < service env < envFrom < env).
//!
//! Everything here is pure: ConfigMaps and Secrets are fetched by the caller into [`Refs`].

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::images::ImageEntry;

/// The address and port pods use to reach the apiserver (there is no Service proxy).
pub const API_HOST: &str = "198.18.0.1";
pub const API_PORT: &str = "6443";
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// ConfigMaps and Secrets of the pod's namespace that a container references, by name.
/// A name absent from the map does not exist in the API.
#[derive(Default, Debug, Clone)]
pub struct Refs {
    pub config_maps: HashMap<String, BTreeMap<String, String>>,
    pub secrets: HashMap<String, BTreeMap<String, Vec<u8>>>,
}

/// Names of the ConfigMaps and Secrets a container's env refers to.
pub fn referenced_objects(c: &Container) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut cms = BTreeSet::new();
    let mut secrets = BTreeSet::new();
    for e in c.env_from.iter().flatten() {
        if let Some(r) = &e.config_map_ref {
            cms.insert(r.name.clone());
        }
        if let Some(r) = &e.secret_ref {
            secrets.insert(r.name.clone());
        }
    }
    for e in c.env.iter().flatten() {
        if let Some(vf) = &e.value_from {
            if let Some(r) = &vf.config_map_key_ref {
                cms.insert(r.name.clone());
            }
            if let Some(r) = &vf.secret_key_ref {
                secrets.insert(r.name.clone());
            }
        }
    }
    (cms, secrets)
}

/// Resolves a downward-API `fieldRef` path against the pod.
pub fn field_ref(pod: &Pod, path: &str, pod_ip: &str) -> Option<String> {
    let md = &pod.metadata;
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let map_entry = |m: &Option<BTreeMap<String, String>>, key: &str| {
        m.as_ref()
            .and_then(|m| m.get(key).cloned())
            .unwrap_or_default()
    };
    Some(match path {
        "metadata.name" => md.name.clone().unwrap_or_default(),
        "metadata.namespace" => md.namespace.clone().unwrap_or_default(),
        "metadata.uid" => md.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(md.labels.as_ref()),
        "metadata.annotations" => format_map(md.annotations.as_ref()),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into()),
        "status.podIP" => pod_ip.to_string(),
        "status.podIPs" => pod_ip.to_string(),
        "status.hostIP" | "status.hostIPs" => API_HOST.to_string(),
        p => {
            if let Some(k) = p
                .strip_prefix("metadata.labels['")
                .and_then(|r| r.strip_suffix("']"))
            {
                map_entry(&md.labels, k)
            } else if let Some(k) = p
                .strip_prefix("metadata.annotations['")
                .and_then(|r| r.strip_suffix("']"))
            {
                map_entry(&md.annotations, k)
            } else {
                let _ = status;
                return None;
            }
        }
    })
}

/// `key="value"` lines, sorted, as the downward API renders labels/annotations.
pub fn format_map(m: Option<&BTreeMap<String, String>>) -> String {
    m.map(|m| {
        m.iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect::<Vec<_>>()
            .join("\n")
    })
    .unwrap_or_default()
}

/// Resolves a `resourceFieldRef` (limits/requests of cpu/memory/ephemeral-storage). Without
/// a limit the node allocatable stands in, as with the real kubelet.
pub fn resource_field_ref(c: &Container, resource: &str, divisor: Option<&str>) -> String {
    let res = c.resources.as_ref();
    let (kind, name) = resource.split_once('.').unwrap_or(("limits", resource));
    let q = match kind {
        "requests" => res.and_then(|r| r.requests.as_ref()),
        _ => res.and_then(|r| r.limits.as_ref()),
    }
    .and_then(|m| m.get(name))
    .map(|q| q.0.clone());
    let default = match name {
        "cpu" => "8",
        "memory" => "16Gi",
        _ => "0",
    };
    let value = parse_quantity(q.as_deref().unwrap_or(default)).unwrap_or(0.0);
    let div = divisor
        .and_then(parse_quantity)
        .filter(|d| *d > 0.0)
        .unwrap_or(1.0);
    format!("{}", (value / div).ceil() as i64)
}

/// Parses a Kubernetes quantity (`100m`, `1Gi`, `2k`, `1e3`) into a number.
pub fn parse_quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let suffixes: [(&str, f64); 13] = [
        ("Ki", 1024.0),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ];
    for (suf, mul) in suffixes {
        if let Some(n) = s.strip_suffix(suf) {
            return n.parse::<f64>().ok().map(|v| v * mul);
        }
    }
    s.parse::<f64>().ok()
}

/// Expands `$(VAR)` references using `lookup`; `$$(VAR)` yields a literal `$(VAR)` and
/// unknown variables are left untouched, as Kubernetes does.
pub fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let b = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            match b[i + 1] {
                b'$' => {
                    out.push('$');
                    i += 2;
                    continue;
                }
                b'(' => {
                    if let Some(end) = input[i + 2..].find(')') {
                        let name = &input[i + 2..i + 2 + end];
                        match lookup(name) {
                            Some(v) => out.push_str(&v),
                            None => out.push_str(&input[i..i + 3 + end]),
                        }
                        i += 3 + end;
                        continue;
                    }
                }
                _ => {}
            }
        }
        let ch = input[i..].chars().next().expect("char boundary");
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// Ordered environment with override semantics (a later set replaces the value but keeps
/// the first position, like the kubelet's env list).
#[derive(Default, Debug, Clone)]
pub struct EnvList {
    vars: Vec<(String, String)>,
}

impl EnvList {
    pub fn set(&mut self, k: &str, v: String) {
        if let Some(e) = self.vars.iter_mut().find(|(n, _)| n == k) {
            e.1 = v;
        } else {
            self.vars.push((k.to_string(), v));
        }
    }
    pub fn get(&self, k: &str) -> Option<String> {
        self.vars
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
    }
    pub fn into_vec(self) -> Vec<(String, String)> {
        self.vars
    }
}

/// Builds a container's environment. An `Err` is a `CreateContainerConfigError` message.
pub fn build_env(
    pod: &Pod,
    c: &Container,
    pod_ip: &str,
    image: &ImageEntry,
    refs: &Refs,
) -> Result<Vec<(String, String)>, String> {
    let mut env = EnvList::default();
    let base_path = image
        .env
        .get("PATH")
        .cloned()
        .unwrap_or_else(|| DEFAULT_PATH.to_string());
    env.set("PATH", format!("{}:{}", image.path.display(), base_path));
    for (k, v) in &image.env {
        if k != "PATH" {
            env.set(k, v.clone());
        }
    }
    env.set("HOME", "/root".into());
    // The pod's hostname: spec.hostname when set, else its name (as in a real pod's UTS).
    let hostname = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .filter(|h| !h.is_empty())
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default();
    env.set("HOSTNAME", hostname);
    // In-cluster config (client-go/kube-rs read these two).
    env.set("KUBERNETES_SERVICE_HOST", API_HOST.into());
    env.set("KUBERNETES_SERVICE_PORT", API_PORT.into());
    env.set("KUBERNETES_SERVICE_PORT_HTTPS", API_PORT.into());
    env.set("KUBERNETES_PORT", format!("tcp://{API_HOST}:{API_PORT}"));
    env.set(
        "KUBERNETES_PORT_443_TCP",
        format!("tcp://{API_HOST}:{API_PORT}"),
    );

    let ns_lookup = |env: &EnvList| {
        let env = env.clone();
        move |name: &str| env.get(name)
    };

    for ef in c.env_from.iter().flatten() {
        let prefix = ef.prefix.clone().unwrap_or_default();
        if let Some(r) = &ef.config_map_ref {
            match refs.config_maps.get(&r.name) {
                Some(data) => {
                    for (k, v) in data {
                        env.set(&format!("{prefix}{k}"), v.clone());
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(format!("configmap \"{}\" not found", r.name)),
            }
        }
        if let Some(r) = &ef.secret_ref {
            match refs.secrets.get(&r.name) {
                Some(data) => {
                    for (k, v) in data {
                        env.set(
                            &format!("{prefix}{k}"),
                            String::from_utf8_lossy(v).into_owned(),
                        );
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(format!("secret \"{}\" not found", r.name)),
            }
        }
    }

    for e in c.env.iter().flatten() {
        let value = if let Some(v) = &e.value {
            expand(v, &ns_lookup(&env))
        } else if let Some(vf) = &e.value_from {
            if let Some(f) = &vf.field_ref {
                field_ref(pod, &f.field_path, pod_ip)
                    .ok_or_else(|| format!("unsupported fieldRef {}", f.field_path))?
            } else if let Some(r) = &vf.resource_field_ref {
                let cont = match &r.container_name {
                    Some(n) if !n.is_empty() => pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.containers.iter().find(|x| &x.name == n))
                        .unwrap_or(c),
                    _ => c,
                };
                resource_field_ref(cont, &r.resource, r.divisor.as_ref().map(|d| d.0.as_str()))
            } else if let Some(r) = &vf.config_map_key_ref {
                match refs.config_maps.get(&r.name).map(|d| d.get(&r.key)) {
                    Some(Some(v)) => v.clone(),
                    _ if r.optional == Some(true) => continue,
                    Some(None) => {
                        return Err(format!(
                            "couldn't find key {} in ConfigMap {}",
                            r.key, r.name
                        ));
                    }
                    None => return Err(format!("configmap \"{}\" not found", r.name)),
                }
            } else if let Some(r) = &vf.secret_key_ref {
                match refs.secrets.get(&r.name).map(|d| d.get(&r.key)) {
                    Some(Some(v)) => String::from_utf8_lossy(v).into_owned(),
                    _ if r.optional == Some(true) => continue,
                    Some(None) => {
                        return Err(format!("couldn't find key {} in Secret {}", r.key, r.name));
                    }
                    None => return Err(format!("secret \"{}\" not found", r.name)),
                }
            } else {
                String::new()
            }
        } else {
            String::new()
        };
        env.set(&e.name, value);
    }
    Ok(env.into_vec())
}

/// The argv of a container: `command` (or the image entrypoint) followed by `args` (or the
/// image's default args when neither command nor args are set), with `$(VAR)` expanded.
pub fn build_argv(c: &Container, image: &ImageEntry, env: &[(String, String)]) -> Vec<String> {
    let lookup = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let (cmd, args): (Vec<String>, Vec<String>) = match (&c.command, &c.args) {
        (Some(cmd), args) if !cmd.is_empty() => (cmd.clone(), args.clone().unwrap_or_default()),
        (_, Some(args)) if !args.is_empty() => (image.entrypoint.clone(), args.clone()),
        _ => (image.entrypoint.clone(), image.cmd.clone()),
    };
    cmd.iter()
        .chain(args.iter())
        .map(|s| expand(s, &lookup))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, PodSpec};

    fn lookup(n: &str) -> Option<String> {
        match n {
            "A" => Some("1".into()),
            "PORT" => Some("7000".into()),
            _ => None,
        }
    }

    #[test]
    fn expands_references() {
        assert_eq!(expand("--port $(PORT)", &lookup), "--port 7000");
        assert_eq!(expand("$(A)$(A)", &lookup), "11");
        assert_eq!(expand("$$(A)", &lookup), "$(A)");
        assert_eq!(expand("$(NOPE) x", &lookup), "$(NOPE) x");
        assert_eq!(expand("$(A", &lookup), "$(A");
        assert_eq!(expand("a$b$", &lookup), "a$b$");
        assert_eq!(expand("é$(A)ü", &lookup), "é1ü");
    }

    fn pod() -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("p1".into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some("u-1".into());
        p.metadata.labels = Some(BTreeMap::from([("app".into(), "v".into())]));
        p.spec = Some(PodSpec {
            node_name: Some("node-b".into()),
            ..Default::default()
        });
        p
    }

    fn var(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(value.into()),
            ..Default::default()
        }
    }

    fn field(name: &str, path: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: path.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn builds_env_with_downward_api_and_expansion() {
        let c = Container {
            name: "c".into(),
            env: Some(vec![
                field("POD", "metadata.name"),
                field("IP", "status.podIP"),
                field("NODE", "spec.nodeName"),
                field("APP", "metadata.labels['app']"),
                var("ADDR", "$(IP):6379"),
                var("KUBERNETES_SERVICE_PORT", "1"),
            ]),
            command: Some(vec!["srv".into(), "--announce=$(ADDR)".into()]),
            ..Default::default()
        };
        let img = ImageEntry {
            path: "/img/bin".into(),
            entrypoint: vec![],
            cmd: vec![],
            env: BTreeMap::new(),
        };
        let env = build_env(&pod(), &c, "198.18.1.5", &img, &Refs::default()).unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("POD"), Some("p1"));
        assert_eq!(get("NODE"), Some("node-b"));
        assert_eq!(get("APP"), Some("v"));
        assert_eq!(get("ADDR"), Some("198.18.1.5:6379"));
        assert_eq!(get("HOSTNAME"), Some("p1"));
        assert_eq!(get("KUBERNETES_SERVICE_HOST"), Some("198.18.0.1"));
        assert_eq!(get("KUBERNETES_SERVICE_PORT"), Some("1"));
        assert!(get("PATH").unwrap().starts_with("/img/bin:"));
        let argv = build_argv(&c, &img, &env);
        assert_eq!(argv, vec!["srv", "--announce=198.18.1.5:6379"]);
    }

    #[test]
    fn missing_configmap_is_a_config_error() {
        let c = Container {
            name: "c".into(),
            env_from: Some(vec![k8s_openapi::api::core::v1::EnvFromSource {
                config_map_ref: Some(k8s_openapi::api::core::v1::ConfigMapEnvSource {
                    name: "cm".into(),
                    optional: None,
                }),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let img = ImageEntry {
            path: "/x".into(),
            entrypoint: vec!["e".into()],
            cmd: vec!["d".into()],
            env: BTreeMap::new(),
        };
        assert!(build_env(&pod(), &c, "1.2.3.4", &img, &Refs::default()).is_err());
        let mut refs = Refs::default();
        refs.config_maps
            .insert("cm".into(), BTreeMap::from([("K".into(), "v".into())]));
        let env = build_env(&pod(), &c, "1.2.3.4", &img, &refs).unwrap();
        assert!(env.contains(&("K".to_string(), "v".to_string())));
        assert_eq!(build_argv(&c, &img, &env), vec!["e", "d"]);
    }

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("100m"), Some(0.1));
        assert_eq!(parse_quantity("1Gi"), Some(1073741824.0));
        let c = Container::default();
        assert_eq!(resource_field_ref(&c, "limits.cpu", None), "8");
        assert_eq!(
            resource_field_ref(&c, "limits.memory", Some("1Mi")),
            "16384"
        );
    }
}
