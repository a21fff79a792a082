//! Volumes: ConfigMap, Secret, projected (incl. service-account tokens), downward API,
//! emptyDir, hostPath and persistentVolumeClaim (a per-claim directory that outlives pods).
//!
//! API-backed volumes are written with the atomic writer and refreshed when their objects
//! change (cluster-wide watches publish change notices; each pod re-renders what it uses),
//! and tokens are renewed before they expire, as the real kubelet does.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, DownwardAPIVolumeFile, KeyToPath, Pod, Secret, ServiceAccount, Volume,
};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use serde::{Deserialize, Serialize};

use crate::atomic::{self, FileEntry, Payload};
use crate::envvars;

/// A change notice from the cluster-wide ConfigMap/Secret watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectChange {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
}

/// One bind mount the in-namespace wrapper performs before exec'ing the container.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MountSpec {
    pub source: PathBuf,
    pub target: PathBuf,
    pub read_only: bool,
}

pub struct PodVolumes {
    pod: std::sync::RwLock<Pod>,
    pod_dir: PathBuf,
    pvc_root: PathBuf,
    client: Client,
    /// (volume name, source index) -> (token, renew after)
    tokens: Mutex<HashMap<(String, usize), (String, Timestamp)>>,
}

fn mode(m: Option<i32>, default: Option<i32>) -> u32 {
    m.or(default).unwrap_or(0o644) as u32 & 0o7777
}

fn select_items(
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    default_mode: Option<i32>,
    what: &str,
    optional: bool,
    out: &mut Payload,
) -> anyhow::Result<()> {
    match items {
        None => {
            for (k, v) in data {
                out.insert(
                    k.clone(),
                    FileEntry {
                        data: v.clone(),
                        mode: mode(None, default_mode),
                    },
                );
            }
        }
        Some(items) => {
            for it in items {
                match data.get(&it.key) {
                    Some(v) => {
                        out.insert(
                            it.path.clone(),
                            FileEntry {
                                data: v.clone(),
                                mode: mode(it.mode, default_mode),
                            },
                        );
                    }
                    None if optional => {}
                    None => bail!("{what}: key {:?} not found", it.key),
                }
            }
        }
    }
    Ok(())
}

fn cm_bytes(cm: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut m: BTreeMap<String, Vec<u8>> = cm
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_bytes().to_vec()))
        .collect();
    for (k, v) in cm.binary_data.iter().flatten() {
        m.insert(k.clone(), v.0.clone());
    }
    m
}

fn secret_bytes(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut m: BTreeMap<String, Vec<u8>> = s
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    for (k, v) in s.string_data.iter().flatten() {
        m.insert(k.clone(), v.as_bytes().to_vec());
    }
    m
}

/// Renders downward API items (pure).
pub fn downward_items(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default_mode: Option<i32>,
    out: &mut Payload,
) -> anyhow::Result<()> {
    let pod_ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_default();
    for it in items {
        let value = if let Some(f) = &it.field_ref {
            envvars::field_ref(pod, &f.field_path, &pod_ip)
                .ok_or_else(|| anyhow!("unsupported fieldRef {}", f.field_path))?
        } else if let Some(r) = &it.resource_field_ref {
            let spec = pod.spec.clone().unwrap_or_default();
            let c: Container = spec
                .containers
                .iter()
                .find(|c| Some(&c.name) == r.container_name.as_ref())
                .cloned()
                .unwrap_or_default();
            envvars::resource_field_ref(&c, &r.resource, r.divisor.as_ref().map(|d| d.0.as_str()))
        } else {
            String::new()
        };
        out.insert(
            it.path.clone(),
            FileEntry {
                data: value.into_bytes(),
                mode: mode(it.mode, default_mode),
            },
        );
    }
    Ok(())
}

impl PodVolumes {
    pub fn new(pod: Pod, pod_dir: PathBuf, pvc_root: PathBuf, client: Client) -> Self {
        Self {
            pod: std::sync::RwLock::new(pod),
            pod_dir,
            pvc_root,
            client,
            tokens: Mutex::new(HashMap::new()),
        }
    }

    /// Keeps the downward API current with the latest pod (labels/annotations may change).
    pub fn set_pod(&self, pod: Pod) {
        *self.pod.write().expect("pod lock") = pod;
    }

    fn pod(&self) -> Pod {
        self.pod.read().expect("pod lock").clone()
    }

    fn ns(&self) -> String {
        self.pod().metadata.namespace.clone().unwrap_or_default()
    }

    fn volumes(&self) -> Vec<Volume> {
        self.pod()
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default()
    }

    /// Host directory that backs a volume.
    pub fn volume_dir(&self, v: &Volume) -> PathBuf {
        if let Some(hp) = &v.host_path {
            return PathBuf::from(&hp.path);
        }
        if let Some(pvc) = &v.persistent_volume_claim {
            return self
                .pvc_root
                .join(format!("{}_{}", self.ns(), pvc.claim_name));
        }
        self.pod_dir.join("volumes").join(&v.name)
    }

    async fn config_map(&self, name: &str) -> anyhow::Result<Option<ConfigMap>> {
        Api::<ConfigMap>::namespaced(self.client.clone(), &self.ns())
            .get_opt(name)
            .await
            .with_context(|| format!("get configmap {name}"))
    }

    async fn secret(&self, name: &str) -> anyhow::Result<Option<Secret>> {
        Api::<Secret>::namespaced(self.client.clone(), &self.ns())
            .get_opt(name)
            .await
            .with_context(|| format!("get secret {name}"))
    }

    /// A bound service-account token, reused until 80% of its lifetime has passed.
    async fn token(
        &self,
        key: (String, usize),
        audience: Option<String>,
        expiration: Option<i64>,
    ) -> anyhow::Result<String> {
        if let Some((t, renew_after)) = self.tokens.lock().expect("tokens").get(&key)
            && Timestamp::now() < *renew_after
        {
            return Ok(t.clone());
        }
        let pod = self.pod();
        let spec = pod.spec.clone().unwrap_or_default();
        let sa = spec
            .service_account_name
            .clone()
            .unwrap_or_else(|| "default".into());
        let req = TokenRequest {
            spec: TokenRequestSpec {
                audiences: audience.into_iter().collect(),
                expiration_seconds: Some(expiration.unwrap_or(3607)),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: pod.metadata.name.clone(),
                    uid: pod.metadata.uid.clone(),
                }),
            },
            ..Default::default()
        };
        let api = Api::<ServiceAccount>::namespaced(self.client.clone(), &self.ns());
        let resp: TokenRequest = api
            .create_subresource("token", &sa, &PostParams::default(), &req)
            .await
            .with_context(|| format!("token request for serviceaccount {sa}"))?;
        let token = resp.status.map(|s| s.token).unwrap_or_default();
        let ttl = expiration.unwrap_or(3607).max(60) as u64;
        let renew_after = Timestamp::now() + Duration::from_secs(ttl * 8 / 10);
        self.tokens
            .lock()
            .expect("tokens")
            .insert(key, (token.clone(), renew_after));
        Ok(token)
    }

    /// The payload of an API-backed volume; None for directory volumes.
    pub async fn payload(&self, v: &Volume) -> anyhow::Result<Option<Payload>> {
        let mut out = Payload::new();
        if let Some(src) = &v.config_map {
            let optional = src.optional == Some(true);
            match self.config_map(&src.name).await? {
                Some(cm) => select_items(
                    &cm_bytes(&cm),
                    src.items.as_ref(),
                    src.default_mode,
                    &format!("configmap {}", src.name),
                    optional,
                    &mut out,
                )?,
                None if optional => {}
                None => bail!("configmap \"{}\" not found", src.name),
            }
        } else if let Some(src) = &v.secret {
            let name = src.secret_name.clone().unwrap_or_default();
            let optional = src.optional == Some(true);
            match self.secret(&name).await? {
                Some(s) => select_items(
                    &secret_bytes(&s),
                    src.items.as_ref(),
                    src.default_mode,
                    &format!("secret {name}"),
                    optional,
                    &mut out,
                )?,
                None if optional => {}
                None => bail!("secret \"{name}\" not found"),
            }
        } else if let Some(src) = &v.downward_api {
            downward_items(
                &self.pod(),
                src.items.as_deref().unwrap_or_default(),
                src.default_mode,
                &mut out,
            )?;
        } else if let Some(src) = &v.projected {
            let dm = src.default_mode;
            for (i, s) in src.sources.iter().flatten().enumerate() {
                if let Some(c) = &s.config_map {
                    let optional = c.optional == Some(true);
                    match self.config_map(&c.name).await? {
                        Some(cm) => select_items(
                            &cm_bytes(&cm),
                            c.items.as_ref(),
                            dm,
                            &format!("configmap {}", c.name),
                            optional,
                            &mut out,
                        )?,
                        None if optional => {}
                        None => bail!("configmap \"{}\" not found", c.name),
                    }
                }
                if let Some(c) = &s.secret {
                    let optional = c.optional == Some(true);
                    match self.secret(&c.name).await? {
                        Some(sec) => select_items(
                            &secret_bytes(&sec),
                            c.items.as_ref(),
                            dm,
                            &format!("secret {}", c.name),
                            optional,
                            &mut out,
                        )?,
                        None if optional => {}
                        None => bail!("secret \"{}\" not found", c.name),
                    }
                }
                if let Some(d) = &s.downward_api {
                    downward_items(
                        &self.pod(),
                        d.items.as_deref().unwrap_or_default(),
                        dm,
                        &mut out,
                    )?;
                }
                if let Some(t) = &s.service_account_token {
                    let token = self
                        .token(
                            (v.name.clone(), i),
                            t.audience.clone(),
                            t.expiration_seconds,
                        )
                        .await?;
                    // Tokens are 0600 unless a mode says otherwise, like the real kubelet.
                    out.insert(
                        t.path.clone(),
                        FileEntry {
                            data: token.into_bytes(),
                            mode: mode(dm, Some(0o600)),
                        },
                    );
                }
            }
        } else {
            return Ok(None);
        }
        Ok(Some(out))
    }

    /// Writes one volume (creating directory volumes); returns true if content changed.
    pub async fn materialise(&self, v: &Volume) -> anyhow::Result<bool> {
        let dir = self.volume_dir(v);
        match self.payload(v).await? {
            Some(p) => {
                let changed = atomic::write(&dir, &p)
                    .with_context(|| format!("writing volume {}", v.name))?;
                if changed {
                    tracing::info!(pod = ?self.pod().metadata.name, volume = %v.name, files = p.len(), "volume content published");
                }
                Ok(changed)
            }
            None => {
                if v.host_path.is_none()
                    || matches!(
                        v.host_path.as_ref().and_then(|h| h.type_.as_deref()),
                        Some("DirectoryOrCreate")
                    )
                {
                    std::fs::create_dir_all(&dir)?;
                }
                Ok(false)
            }
        }
    }

    pub async fn setup_all(&self) -> anyhow::Result<()> {
        for v in self.volumes() {
            self.materialise(&v).await?;
        }
        Ok(())
    }

    /// Whether the volume renders from `change`'s object.
    fn uses(v: &Volume, change: &ObjectChange) -> bool {
        let (cm, sec) = (change.kind == "ConfigMap", change.kind == "Secret");
        if let Some(s) = &v.config_map {
            return cm && s.name == change.name;
        }
        if let Some(s) = &v.secret {
            return sec && s.secret_name.as_deref() == Some(&change.name);
        }
        if let Some(p) = &v.projected {
            return p.sources.iter().flatten().any(|s| {
                (cm && s.config_map.as_ref().is_some_and(|c| c.name == change.name))
                    || (sec && s.secret.as_ref().is_some_and(|c| c.name == change.name))
            });
        }
        false
    }

    /// Re-renders the volumes affected by `change` (all API-backed ones if None: periodic
    /// resync and token renewal).
    pub async fn refresh(&self, change: Option<&ObjectChange>) {
        for v in self.volumes() {
            let relevant = match change {
                Some(c) => c.namespace == self.ns() && Self::uses(&v, c),
                None => {
                    v.config_map.is_some()
                        || v.secret.is_some()
                        || v.projected.is_some()
                        || v.downward_api.is_some()
                }
            };
            if relevant && let Err(e) = self.materialise(&v).await {
                tracing::warn!(pod = ?self.pod().metadata.name, volume = %v.name, error = %format!("{e:#}"), "volume refresh failed");
            }
        }
    }

    /// The bind mounts of a container, parents before children.
    pub fn mounts_for(&self, c: &Container) -> Vec<MountSpec> {
        let vols = self.volumes();
        let mut out = Vec::new();
        for m in c.volume_mounts.iter().flatten() {
            let Some(v) = vols.iter().find(|v| v.name == m.name) else {
                continue;
            };
            let base = self.volume_dir(v);
            let source = match m.sub_path.as_deref() {
                Some(sp) if !sp.is_empty() => {
                    let p = base.join(sp);
                    if !p.exists()
                        && v.config_map.is_none()
                        && v.secret.is_none()
                        && v.projected.is_none()
                    {
                        let _ = std::fs::create_dir_all(&p);
                    }
                    p
                }
                _ => base,
            };
            let api_backed = v.config_map.is_some()
                || v.secret.is_some()
                || v.projected.is_some()
                || v.downward_api.is_some();
            out.push(MountSpec {
                source,
                target: PathBuf::from(&m.mount_path),
                read_only: m.read_only == Some(true) || api_backed,
            });
        }
        out.sort_by_key(|m| m.target.components().count());
        out
    }
}

/// Writes the pod's /etc/hosts (mounted into every container like the real kubelet does).
pub fn write_etc_hosts(pod_dir: &Path, pod: &Pod, ip: &str) -> std::io::Result<PathBuf> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let host = spec.hostname.clone().unwrap_or(name);
    let fqdn = match &spec.subdomain {
        Some(sd) => format!(
            "{host}.{sd}.{}.svc.cluster.local\t{host}",
            pod.metadata.namespace.clone().unwrap_or_default()
        ),
        None => host,
    };
    let content = format!(
        "# Kubernetes-managed hosts file (vk-kubelet).\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n{ip}\t{fqdn}\n"
    );
    let p = pod_dir.join("etc-hosts");
    std::fs::write(&p, content)?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ObjectFieldSelector, PodSpec};

    #[test]
    fn selects_items_with_modes() {
        let data = BTreeMap::from([
            ("a".to_string(), b"1".to_vec()),
            ("b".to_string(), b"2".to_vec()),
        ]);
        let mut out = Payload::new();
        select_items(&data, None, Some(0o400), "cm", false, &mut out).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out["a"].mode, 0o400);
        let mut out = Payload::new();
        let items = vec![KeyToPath {
            key: "b".into(),
            path: "dir/b.txt".into(),
            mode: Some(0o600),
        }];
        select_items(&data, Some(&items), None, "cm", false, &mut out).unwrap();
        assert_eq!(out.keys().collect::<Vec<_>>(), vec!["dir/b.txt"]);
        assert_eq!(out["dir/b.txt"].mode, 0o600);
        let missing = vec![KeyToPath {
            key: "z".into(),
            path: "z".into(),
            mode: None,
        }];
        assert!(
            select_items(
                &data,
                Some(&missing),
                None,
                "cm",
                false,
                &mut Payload::new()
            )
            .is_err()
        );
        assert!(select_items(&data, Some(&missing), None, "cm", true, &mut Payload::new()).is_ok());
    }

    #[test]
    fn renders_downward_api() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("p".into());
        pod.metadata.labels = Some(BTreeMap::from([
            ("b".into(), "2".into()),
            ("a".into(), "1".into()),
        ]));
        pod.spec = Some(PodSpec::default());
        let items = vec![
            DownwardAPIVolumeFile {
                path: "labels".into(),
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.labels".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            DownwardAPIVolumeFile {
                path: "name".into(),
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.name".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ];
        let mut out = Payload::new();
        downward_items(&pod, &items, None, &mut out).unwrap();
        assert_eq!(out["labels"].data, b"a=\"1\"\nb=\"2\"");
        assert_eq!(out["name"].data, b"p");
    }
}
