//! Config resolution, exactly as the resource model states it: `configRef` → ValkeyConfig,
//! follow `baseRef` up to 10 levels; a field set on the child wins; `valkey` settings merge per
//! key; `acl` set on a child replaces its base's bindings entirely; `imageRef` is the first one
//! found walking from the child to the root; the ValkeyImage is looked up by name.
//! Cluster-level ACL bindings are added to the config's, and usernames must be unique across
//! the merged set.
//!
//! Pure: the caller hands in a [`Menu`] (reflector stores in the controller, maps in tests).

use std::collections::BTreeMap;
use std::fmt;

use crate::api::constants::MAX_CONFIG_CHAIN_DEPTH;
use crate::api::placement::Scheduling;
use crate::api::storage::Storage;
use crate::api::{AclBinding, Resources, ValkeyConfigSpec, ValkeyImageSpec, ValkeyRoleSpec};

/// Where resolution reads the platform team's menu from.
pub trait Menu {
    fn config(&self, name: &str) -> Option<ValkeyConfigSpec>;
    fn image(&self, name: &str) -> Option<ValkeyImageSpec>;
    fn role(&self, name: &str) -> Option<ValkeyRoleSpec>;
}

/// A menu held in maps: tests, and snapshots.
#[derive(Clone, Debug, Default)]
pub struct MenuMap {
    pub configs: BTreeMap<String, ValkeyConfigSpec>,
    pub images: BTreeMap<String, ValkeyImageSpec>,
    pub roles: BTreeMap<String, ValkeyRoleSpec>,
    /// Images being deleted (held by the image-in-use finalizer until no config names them).
    pub terminating_images: std::collections::BTreeSet<String>,
}

impl MenuMap {
    /// The menu of listed menu objects, keyed by name.
    pub fn from_objects(
        configs: impl IntoIterator<Item = crate::api::ValkeyConfig>,
        images: impl IntoIterator<Item = crate::api::ValkeyImage>,
        roles: impl IntoIterator<Item = crate::api::ValkeyRole>,
    ) -> MenuMap {
        use kube::ResourceExt as _;
        let images: Vec<_> = images.into_iter().collect();
        MenuMap {
            configs: configs
                .into_iter()
                .map(|c| (c.name_any(), c.spec))
                .collect(),
            terminating_images: terminating(&images),
            images: images.into_iter().map(|i| (i.name_any(), i.spec)).collect(),
            roles: roles.into_iter().map(|r| (r.name_any(), r.spec)).collect(),
        }
    }
}

/// The names of the images being deleted.
pub fn terminating<'a>(
    images: impl IntoIterator<Item = &'a crate::api::ValkeyImage>,
) -> std::collections::BTreeSet<String> {
    use kube::ResourceExt as _;
    images
        .into_iter()
        .filter(|i| i.metadata.deletion_timestamp.is_some())
        .map(|i| i.name_any())
        .collect()
}

impl Menu for MenuMap {
    fn config(&self, name: &str) -> Option<ValkeyConfigSpec> {
        self.configs.get(name).cloned()
    }
    fn image(&self, name: &str) -> Option<ValkeyImageSpec> {
        self.images.get(name).cloned()
    }
    fn role(&self, name: &str) -> Option<ValkeyRoleSpec> {
        self.roles.get(name).cloned()
    }
}

/// Refuses a resolution that would roll members to an older **major** Valkey version than any
/// of them runs (`running`: the versions of the cluster's current members). Replication goes
/// down only within a major version (Valkey 9 replicates in RDB format 80, which Valkey 8 and
/// earlier cannot load), so such a rollout could only stall with every shard a copy short. The
/// admission webhook refuses the repoint itself; this holds when it was not asked (failure
/// policy Ignore) or the cluster was created after the repoint.
pub fn refuse_major_downgrade<'a>(
    resolved: &ResolvedConfig,
    running: impl IntoIterator<Item = &'a str>,
) -> Result<(), ResolveError> {
    fn major(version: &str) -> Option<u64> {
        version.split('.').next()?.trim().parse().ok()
    }
    let Some(target) = major(&resolved.image.version) else {
        return Ok(());
    };
    let newest = running
        .into_iter()
        .filter_map(|v| major(v).map(|m| (m, v)))
        .max_by_key(|(m, _)| *m);
    match newest {
        Some((m, version)) if m > target => Err(ResolveError::MajorDowngrade {
            image: resolved.image_ref.clone(),
            running: version.to_string(),
            resolved: resolved.image.version.clone(),
        }),
        _ => Ok(()),
    }
}

/// Resources a node gets when no config in the chain sets them.
pub const DEFAULT_CPU: &str = "1";
pub const DEFAULT_MEMORY: &str = "1Gi";

/// The merged result of a config chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedConfig {
    /// Config names from the cluster's `configRef` (first) to the root (last).
    pub chain: Vec<String>,
    /// The ValkeyImage name (first `imageRef` from the child up) and its spec.
    pub image_ref: String,
    pub image: ValkeyImageSpec,
    /// cpu and memory, each from the nearest config that sets it (defaults otherwise).
    pub resources: Resources,
    /// Settings merged per key, child over base.
    pub valkey: BTreeMap<String, String>,
    /// Platform-level bindings: those of the nearest config that sets `acl`.
    pub acl: Vec<AclBinding>,
    /// Scheduling of the nearest config that sets `scheduling` (empty otherwise).
    pub scheduling: Scheduling,
    /// Storage of the nearest config that sets `storage` (none: memory-only members).
    pub storage: Option<Storage>,
    /// Metrics of the nearest config that sets `metrics` (none: no exporter).
    pub metrics: Option<crate::api::metrics::Metrics>,
    /// External Service types of the nearest config that sets `externalAccess` (none: no
    /// external access).
    pub external_access: Vec<crate::api::external::ExternalServiceType>,
}

/// Who holds a reference that could not be resolved; used in messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Referrer {
    /// `ValkeyCluster.spec.configRef`.
    Cluster,
    /// `ValkeyConfig <name>.spec.baseRef`.
    Config(String),
}

/// Why a chain does not resolve. Each message names the broken link and says how to fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResolveError {
    ConfigNotFound {
        name: String,
        referrer: Referrer,
    },
    Cycle {
        chain: Vec<String>,
    },
    TooDeep {
        chain: Vec<String>,
    },
    NoImageRef {
        chain: Vec<String>,
    },
    ImageNotFound {
        image: String,
        config: String,
    },
    RoleNotFound {
        role: String,
        username: String,
    },
    DuplicateUsername {
        username: String,
    },
    /// A binding the API server should have refused (it skipped CEL, or an object predates a
    /// rule): never rendered into an ACL file, where a newline would start another user.
    InvalidBinding {
        username: String,
        problem: String,
    },
    /// More members than a cluster may have (`shards x (1 + replicasPerShard)` over
    /// [`crate::api::constants::MAX_MEMBERS`]), which the API server should have refused (it
    /// skipped CEL and the webhook, or the object predates the rule): never planned.
    TooManyMembers {
        problem: String,
    },
    /// `spec.externalAccess` asks for a Service type the config does not allow, or comes with
    /// TLS ([`crate::api::external::external_access_problem`]).
    ExternalAccessNotAllowed {
        problem: String,
    },
    /// The resolved image is of an older major version than members already run.
    MajorDowngrade {
        image: String,
        running: String,
        resolved: String,
    },
}

impl ResolveError {
    /// A short machine-friendly reason (status condition reason, metric label).
    pub fn reason(&self) -> &'static str {
        match self {
            ResolveError::ConfigNotFound { .. } => "ConfigNotFound",
            ResolveError::Cycle { .. } => "ConfigCycle",
            ResolveError::TooDeep { .. } => "ConfigChainTooDeep",
            ResolveError::NoImageRef { .. } => "NoImageRef",
            ResolveError::ImageNotFound { .. } => "ImageNotFound",
            ResolveError::RoleNotFound { .. } => "RoleNotFound",
            ResolveError::DuplicateUsername { .. } => "DuplicateUsername",
            ResolveError::MajorDowngrade { .. } => "MajorVersionDowngrade",
            ResolveError::InvalidBinding { .. } => "InvalidBinding",
            ResolveError::TooManyMembers { .. } => "TooManyMembers",
            ResolveError::ExternalAccessNotAllowed { .. } => "ExternalAccessNotAllowed",
        }
    }
}

fn arrow(chain: &[String]) -> String {
    chain.join(" -> ")
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResolveError::ConfigNotFound {
                name,
                referrer: Referrer::Cluster,
            } => write!(
                f,
                "spec.configRef names ValkeyConfig \"{name}\", which does not exist; ask the platform team to publish it, or choose an existing config (kubectl get valkeyconfigs)"
            ),
            ResolveError::ConfigNotFound {
                name,
                referrer: Referrer::Config(child),
            } => write!(
                f,
                "ValkeyConfig \"{child}\" inherits from \"{name}\" (spec.baseRef), which does not exist; create ValkeyConfig \"{name}\" or change spec.baseRef of \"{child}\""
            ),
            ResolveError::Cycle { chain } => write!(
                f,
                "ValkeyConfig inheritance forms a cycle ({}); change spec.baseRef of one of them so the chain ends",
                arrow(chain)
            ),
            ResolveError::TooDeep { chain } => write!(
                f,
                "ValkeyConfig chain is deeper than {MAX_CONFIG_CHAIN_DEPTH} levels ({} ...); flatten the baseRef chain",
                arrow(&chain[..chain.len().min(MAX_CONFIG_CHAIN_DEPTH + 1)])
            ),
            ResolveError::NoImageRef { chain } => write!(
                f,
                "no ValkeyConfig in the chain {} sets spec.imageRef; set imageRef on one of them",
                arrow(chain)
            ),
            ResolveError::ImageNotFound { image, config } => write!(
                f,
                "ValkeyConfig \"{config}\" uses image \"{image}\" (spec.imageRef), but no ValkeyImage \"{image}\" exists (it is not on the allowlist); create the ValkeyImage or change spec.imageRef"
            ),
            ResolveError::RoleNotFound { role, username } => write!(
                f,
                "ACL user \"{username}\" is bound to ValkeyRole \"{role}\", which does not exist; create the ValkeyRole or change the binding's roleRef"
            ),
            ResolveError::DuplicateUsername { username } => write!(
                f,
                "ACL user \"{username}\" is bound both by the ValkeyConfig and by the ValkeyCluster; usernames must be unique across both, rename one"
            ),
            ResolveError::InvalidBinding { username, problem } => write!(
                f,
                "ACL binding {username:?} is not valid ({problem}); it is not applied: fix the binding in the ValkeyConfig or ValkeyCluster"
            ),
            ResolveError::TooManyMembers { problem } => write!(
                f,
                "{problem}; the operator creates and changes no member until then"
            ),
            ResolveError::ExternalAccessNotAllowed { problem } => {
                write!(f, "{problem}; the operator creates no member until then")
            }
            ResolveError::MajorDowngrade {
                image,
                running,
                resolved,
            } => write!(
                f,
                "members run Valkey {running} but the config now resolves to ValkeyImage \"{image}\" with Valkey {resolved}, an older major version whose replicas cannot load the data a {running} primary sends; the cluster keeps running as it is: point the config back at a {running}-compatible image, or move this cluster to a config of its own"
            ),
        }
    }
}

impl std::error::Error for ResolveError {}

/// The configs from `config_ref` to its root (names and specs, child first): a cycle, a chain
/// deeper than [`MAX_CONFIG_CHAIN_DEPTH`] or a missing config is an error.
fn walk_chain(
    menu: &impl Menu,
    config_ref: &str,
) -> Result<(Vec<String>, Vec<ValkeyConfigSpec>), ResolveError> {
    let mut chain: Vec<String> = Vec::new();
    let mut specs: Vec<ValkeyConfigSpec> = Vec::new();
    let mut next = Some((config_ref.to_string(), Referrer::Cluster));
    while let Some((name, referrer)) = next.take() {
        if chain.contains(&name) {
            chain.push(name);
            return Err(ResolveError::Cycle { chain });
        }
        if chain.len() == MAX_CONFIG_CHAIN_DEPTH {
            chain.push(name);
            return Err(ResolveError::TooDeep { chain });
        }
        let spec = menu
            .config(&name)
            .ok_or_else(|| ResolveError::ConfigNotFound {
                name: name.clone(),
                referrer,
            })?;
        next = spec
            .base_ref
            .clone()
            .map(|base| (base, Referrer::Config(name.clone())));
        chain.push(name);
        specs.push(spec);
    }
    Ok((chain, specs))
}

/// Walks the chain from `config_ref` to its root and merges it.
pub fn resolve_config(menu: &impl Menu, config_ref: &str) -> Result<ResolvedConfig, ResolveError> {
    let (chain, specs) = walk_chain(menu, config_ref)?;
    let (image_config, image_ref) = chain
        .iter()
        .zip(&specs)
        .find_map(|(name, spec)| spec.image_ref.clone().map(|image| (name.clone(), image)))
        .ok_or_else(|| ResolveError::NoImageRef {
            chain: chain.clone(),
        })?;
    let image = menu
        .image(&image_ref)
        .ok_or_else(|| ResolveError::ImageNotFound {
            image: image_ref.clone(),
            config: image_config,
        })?;

    // Root first, so each child overwrites what its base set.
    let mut valkey = BTreeMap::new();
    let mut cpu = None;
    let mut memory = None;
    let mut acl = None;
    let mut scheduling = None;
    let mut storage = None;
    let mut metrics = None;
    let mut external_access = None;
    for spec in specs.iter().rev() {
        valkey.extend(spec.valkey.clone());
        if let Some(resources) = &spec.resources {
            cpu = resources.cpu.clone().or(cpu);
            memory = resources.memory.clone().or(memory);
        }
        if spec.acl.is_some() {
            acl = spec.acl.clone();
        }
        if spec.scheduling.is_some() {
            scheduling = spec.scheduling.clone();
        }
        if spec.storage.is_some() {
            storage = spec.storage.clone();
        }
        if spec.metrics.is_some() {
            metrics = spec.metrics.clone();
        }
        if let Some(policy) = &spec.external_access {
            external_access = Some(policy.allowed_types.clone());
        }
    }
    Ok(ResolvedConfig {
        chain,
        image_ref,
        image,
        resources: Resources {
            cpu: Some(cpu.unwrap_or_else(|| DEFAULT_CPU.to_string())),
            memory: Some(memory.unwrap_or_else(|| DEFAULT_MEMORY.to_string())),
        },
        valkey,
        acl: acl.unwrap_or_default(),
        scheduling: scheduling.unwrap_or_default(),
        storage,
        metrics,
        external_access: external_access.unwrap_or_default(),
    })
}

/// Config-level bindings plus cluster-level bindings, with every role resolved.
pub fn merge_bindings(
    config_bindings: &[AclBinding],
    cluster_bindings: &[AclBinding],
) -> Result<Vec<AclBinding>, ResolveError> {
    let mut merged: Vec<AclBinding> = config_bindings.to_vec();
    for binding in cluster_bindings {
        if merged.iter().any(|b| b.username == binding.username) {
            return Err(ResolveError::DuplicateUsername {
                username: binding.username.clone(),
            });
        }
        merged.push(binding.clone());
    }
    for binding in &merged {
        check_binding(binding)?;
    }
    Ok(merged)
}

/// The rules the CRD schema states for a binding, checked again before anything is rendered
/// (defence in depth: an API server that skipped CEL must not let a newline or a space start
/// another ACL rule or user).
pub fn check_binding(binding: &AclBinding) -> Result<(), ResolveError> {
    use crate::api::validation::{ACL_PATTERN, ACL_USERNAME, RESERVED_USERNAME_PREFIX, SHA256_HEX};
    let invalid = |problem: String| ResolveError::InvalidBinding {
        username: binding.username.clone(),
        problem,
    };
    let mismatch = |m: crate::api::validation::Mismatch| invalid(m.to_string());
    ACL_USERNAME
        .check("username", &binding.username)
        .map_err(mismatch)?;
    if binding.username.starts_with(RESERVED_USERNAME_PREFIX) {
        return Err(invalid(format!(
            "usernames starting with {RESERVED_USERNAME_PREFIX} are the operator's own"
        )));
    }
    for hash in &binding.password_hashes {
        SHA256_HEX.check("passwordHashes", hash).map_err(mismatch)?;
    }
    for permission in &binding.permissions {
        for key in &permission.keys {
            ACL_PATTERN
                .check("keys[].pattern", &key.pattern)
                .map_err(mismatch)?;
        }
        for channel in &permission.channels {
            ACL_PATTERN
                .check("channels[]", &channel.pattern)
                .map_err(mismatch)?;
        }
    }
    Ok(())
}

/// Looks up every role the bindings name.
pub fn resolve_roles(
    menu: &impl Menu,
    bindings: &[AclBinding],
) -> Result<BTreeMap<String, ValkeyRoleSpec>, ResolveError> {
    let mut roles = BTreeMap::new();
    for binding in bindings {
        for permission in &binding.permissions {
            if roles.contains_key(&permission.role_ref) {
                continue;
            }
            let role =
                menu.role(&permission.role_ref)
                    .ok_or_else(|| ResolveError::RoleNotFound {
                        role: permission.role_ref.clone(),
                        username: binding.username.clone(),
                    })?;
            roles.insert(permission.role_ref.clone(), role);
        }
    }
    Ok(roles)
}

/// A reference from a ValkeyCluster to the platform's menu.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum MenuRef {
    Config(String),
    Image(String),
    Role(String),
}

/// The configs of a chain from `config_ref` down its `baseRef`s, each with its spec, as far as
/// it resolves: a missing config is the last entry (spec `None`); a cycle or a chain deeper
/// than the limit ends it. What the webhook and the watch mapping need when the whole chain
/// does not resolve.
pub fn chain_as_far_as_it_resolves(
    menu: &impl Menu,
    config_ref: &str,
) -> Vec<(String, Option<ValkeyConfigSpec>)> {
    let mut chain: Vec<(String, Option<ValkeyConfigSpec>)> = Vec::new();
    let mut next = Some(config_ref.to_string());
    while let Some(name) = next.take() {
        if chain.iter().any(|(n, _)| *n == name) || chain.len() > MAX_CONFIG_CHAIN_DEPTH {
            break;
        }
        let spec = menu.config(&name);
        next = spec.as_ref().and_then(|s| s.base_ref.clone());
        chain.push((name, spec));
    }
    chain
}

/// The config-level ACL bindings a cluster naming `config_ref` gets: those of the nearest
/// config on the chain that sets `acl` (a child's `acl` replaces its base's), as far as the
/// chain resolves.
pub fn config_bindings(menu: &impl Menu, config_ref: &str) -> Vec<AclBinding> {
    chain_as_far_as_it_resolves(menu, config_ref)
        .into_iter()
        .find_map(|(_, spec)| spec.and_then(|s| s.acl))
        .unwrap_or_default()
}

/// Every menu object a cluster's resolution reads or would read: the configs of its chain
/// (including a missing one), the image, and the roles of its bindings. A change to any of
/// them must reconcile the cluster; used to map watch events to clusters.
pub fn menu_refs(
    menu: &impl Menu,
    config_ref: &str,
    cluster_bindings: &[AclBinding],
) -> std::collections::BTreeSet<MenuRef> {
    let mut refs = std::collections::BTreeSet::new();
    let mut image_found = false;
    let mut config_acl: Option<Vec<AclBinding>> = None;
    for (name, spec) in chain_as_far_as_it_resolves(menu, config_ref) {
        refs.insert(MenuRef::Config(name));
        let Some(spec) = spec else {
            break;
        };
        if !image_found && let Some(image) = &spec.image_ref {
            refs.insert(MenuRef::Image(image.clone()));
            image_found = true;
        }
        if config_acl.is_none() {
            config_acl = spec.acl;
        }
    }
    for binding in config_acl.iter().flatten().chain(cluster_bindings) {
        for permission in &binding.permissions {
            refs.insert(MenuRef::Role(permission.role_ref.clone()));
        }
    }
    refs
}

/// The resolver's fixtures are shared with the kubectl plugin's tests (`crate::plugin`).
#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::api::{AclPermission, CategoryRule, RuleAccess};

    pub(crate) fn image(version: &str) -> ValkeyImageSpec {
        ValkeyImageSpec {
            image_pull_secrets: vec![],
            repository: "valkey/valkey".into(),
            tag: version.into(),
            digest: None,
            version: version.into(),
        }
    }

    pub(crate) fn config(base: Option<&str>, image: Option<&str>) -> ValkeyConfigSpec {
        ValkeyConfigSpec {
            base_ref: base.map(Into::into),
            image_ref: image.map(Into::into),
            resources: None,
            valkey: BTreeMap::new(),
            acl: None,
            scheduling: None,
            storage: None,
            metrics: None,
            external_access: None,
        }
    }

    pub(crate) fn binding(user: &str, role: &str) -> AclBinding {
        AclBinding {
            username: user.into(),
            password_hashes: vec!["a".repeat(64)],
            permissions: vec![AclPermission {
                role_ref: role.into(),
                keys: vec![],
                channels: vec![],
            }],
        }
    }

    /// The seed's example menu: valkey-9-0, standard, large (inherits standard).
    pub(crate) fn seed_menu() -> MenuMap {
        let mut c = MenuMap::default();
        c.images.insert("valkey-9-0".into(), image("9.0.0"));
        let mut standard = config(None, Some("valkey-9-0"));
        standard.resources = Some(Resources {
            cpu: Some("1".into()),
            memory: Some("2Gi".into()),
        });
        standard.valkey.insert("maxmemory".into(), "1500mb".into());
        standard
            .valkey
            .insert("maxmemory-policy".into(), "allkeys-lru".into());
        c.configs.insert("standard".into(), standard);
        let mut large = config(Some("standard"), None);
        large.resources = Some(Resources {
            cpu: Some("4".into()),
            memory: Some("16Gi".into()),
        });
        large.valkey.insert("maxmemory".into(), "12gb".into());
        c.configs.insert("large".into(), large);
        c
    }

    #[test]
    fn menu_refs_list_chain_image_and_roles_including_missing_links() {
        let mut c = seed_menu();
        c.configs.get_mut("standard").unwrap().acl = Some(vec![binding("app", "rw")]);
        let refs = menu_refs(&c, "large", &[binding("batch", "ro")]);
        assert_eq!(
            refs.into_iter().collect::<Vec<_>>(),
            vec![
                MenuRef::Config("large".into()),
                MenuRef::Config("standard".into()),
                MenuRef::Image("valkey-9-0".into()),
                MenuRef::Role("ro".into()),
                MenuRef::Role("rw".into()),
            ]
        );
        // A missing config is still a reference: creating it must reconcile the cluster.
        assert!(menu_refs(&c, "huge", &[]).contains(&MenuRef::Config("huge".into())));
    }

    #[test]
    fn child_inherits_image_and_settings_from_base() {
        let r = resolve_config(&seed_menu(), "large").unwrap();
        assert_eq!(r.chain, vec!["large", "standard"]);
        assert_eq!(r.image_ref, "valkey-9-0");
        assert_eq!(r.image.version, "9.0.0");
    }

    #[test]
    fn valkey_settings_merge_per_key_child_wins() {
        let r = resolve_config(&seed_menu(), "large").unwrap();
        assert_eq!(r.valkey["maxmemory"], "12gb");
        assert_eq!(r.valkey["maxmemory-policy"], "allkeys-lru");
    }

    #[test]
    fn fields_set_on_the_child_win() {
        let r = resolve_config(&seed_menu(), "large").unwrap();
        assert_eq!(r.resources.cpu.as_deref(), Some("4"));
        assert_eq!(r.resources.memory.as_deref(), Some("16Gi"));
        let r = resolve_config(&seed_menu(), "standard").unwrap();
        assert_eq!(r.resources.memory.as_deref(), Some("2Gi"));
    }

    #[test]
    fn scheduling_comes_whole_from_the_nearest_config_that_sets_it() {
        use crate::api::placement::{Scheduling, Toleration, TolerationOperator};
        let mut c = seed_menu();
        assert_eq!(
            resolve_config(&c, "large").unwrap().scheduling,
            Scheduling::default()
        );
        let pool = Scheduling {
            node_affinity: None,
            topology_spread: vec![],
            tolerations: vec![Toleration {
                key: Some("dedicated".into()),
                operator: Some(TolerationOperator::Exists),
                ..Toleration::default()
            }],
            priority_class_name: Some("valkey".into()),
        };
        c.configs.get_mut("standard").unwrap().scheduling = Some(pool.clone());
        assert_eq!(resolve_config(&c, "large").unwrap().scheduling, pool);
        // Set on the child, it replaces the base's as a whole.
        let own = Scheduling {
            node_affinity: None,
            topology_spread: vec![],
            tolerations: vec![],
            priority_class_name: Some("batch".into()),
        };
        c.configs.get_mut("large").unwrap().scheduling = Some(own.clone());
        assert_eq!(resolve_config(&c, "large").unwrap().scheduling, own);
    }

    #[test]
    fn resources_merge_per_field_and_default_when_unset() {
        let mut c = seed_menu();
        let mut only_memory = config(Some("standard"), None);
        only_memory.resources = Some(Resources {
            cpu: None,
            memory: Some("8Gi".into()),
        });
        c.configs.insert("memory-only".into(), only_memory);
        let r = resolve_config(&c, "memory-only").unwrap();
        assert_eq!(r.resources.cpu.as_deref(), Some("1"));
        assert_eq!(r.resources.memory.as_deref(), Some("8Gi"));

        c.configs
            .insert("bare".into(), config(None, Some("valkey-9-0")));
        let r = resolve_config(&c, "bare").unwrap();
        assert_eq!(r.resources.cpu.as_deref(), Some(DEFAULT_CPU));
        assert_eq!(r.resources.memory.as_deref(), Some(DEFAULT_MEMORY));
    }

    #[test]
    fn image_ref_is_the_first_found_from_the_child_up() {
        let mut c = seed_menu();
        c.images.insert("valkey-9-1".into(), image("9.1.2"));
        c.configs
            .insert("newer".into(), config(Some("large"), Some("valkey-9-1")));
        let r = resolve_config(&c, "newer").unwrap();
        assert_eq!(r.image_ref, "valkey-9-1");
        assert_eq!(r.chain, vec!["newer", "large", "standard"]);
    }

    #[test]
    fn acl_on_a_child_replaces_the_base_bindings() {
        let mut c = seed_menu();
        c.configs.get_mut("standard").unwrap().acl =
            Some(vec![binding("app", "rw"), binding("metrics", "ro")]);
        c.configs.get_mut("large").unwrap().acl = Some(vec![binding("batch", "rw")]);
        let r = resolve_config(&c, "large").unwrap();
        assert_eq!(
            r.acl
                .iter()
                .map(|b| b.username.as_str())
                .collect::<Vec<_>>(),
            vec!["batch"]
        );
        // Unset on the child: inherited.
        c.configs.get_mut("large").unwrap().acl = None;
        assert_eq!(resolve_config(&c, "large").unwrap().acl.len(), 2);
        // Set to an empty list: the base's bindings are removed.
        c.configs.get_mut("large").unwrap().acl = Some(vec![]);
        assert!(resolve_config(&c, "large").unwrap().acl.is_empty());
    }

    #[test]
    fn missing_config_blocks_naming_the_cluster_reference() {
        let err = resolve_config(&seed_menu(), "huge").unwrap_err();
        assert_eq!(
            err,
            ResolveError::ConfigNotFound {
                name: "huge".into(),
                referrer: Referrer::Cluster
            }
        );
        assert!(
            err.to_string()
                .contains("spec.configRef names ValkeyConfig \"huge\"")
        );
    }

    #[test]
    fn missing_base_blocks_naming_the_child_and_its_base() {
        let mut c = seed_menu();
        c.configs.get_mut("standard").unwrap().base_ref = Some("base".into());
        let err = resolve_config(&c, "large").unwrap_err();
        assert_eq!(
            err.to_string(),
            "ValkeyConfig \"standard\" inherits from \"base\" (spec.baseRef), which does not exist; create ValkeyConfig \"base\" or change spec.baseRef of \"standard\""
        );
    }

    #[test]
    fn cycle_blocks_and_lists_the_loop() {
        let mut c = MenuMap::default();
        c.configs.insert("a".into(), config(Some("b"), Some("img")));
        c.configs.insert("b".into(), config(Some("a"), None));
        let err = resolve_config(&c, "a").unwrap_err();
        assert_eq!(
            err,
            ResolveError::Cycle {
                chain: vec!["a".into(), "b".into(), "a".into()]
            }
        );
        assert!(err.to_string().contains("a -> b -> a"));
    }

    #[test]
    fn chains_resolve_up_to_ten_levels_and_no_deeper() {
        let mut c = MenuMap::default();
        c.images.insert("img".into(), image("9.0.0"));
        // c0 -> c1 -> ... -> c9: ten configs.
        for i in 0..10 {
            let base = (i < 9).then(|| format!("c{}", i + 1));
            let img = (i == 9).then_some("img");
            c.configs
                .insert(format!("c{i}"), config(base.as_deref(), img));
        }
        assert_eq!(resolve_config(&c, "c0").unwrap().chain.len(), 10);
        // One more level on top: eleven.
        c.configs.insert("top".into(), config(Some("c0"), None));
        let err = resolve_config(&c, "top").unwrap_err();
        assert!(matches!(err, ResolveError::TooDeep { .. }), "{err:?}");
        assert!(err.to_string().contains("deeper than 10"));
    }

    #[test]
    fn a_chain_without_image_ref_blocks() {
        let mut c = MenuMap::default();
        c.configs.insert("a".into(), config(Some("b"), None));
        c.configs.insert("b".into(), config(None, None));
        let err = resolve_config(&c, "a").unwrap_err();
        assert_eq!(
            err,
            ResolveError::NoImageRef {
                chain: vec!["a".into(), "b".into()]
            }
        );
    }

    #[test]
    fn image_ref_naming_no_image_blocks() {
        let mut c = seed_menu();
        c.images.clear();
        let err = resolve_config(&c, "large").unwrap_err();
        assert_eq!(
            err,
            ResolveError::ImageNotFound {
                image: "valkey-9-0".into(),
                config: "standard".into()
            }
        );
        assert!(err.to_string().contains("not on the allowlist"));
    }

    #[test]
    fn cluster_bindings_add_to_config_bindings() {
        let merged = merge_bindings(&[binding("app", "rw")], &[binding("batch", "rw")]).unwrap();
        assert_eq!(
            merged
                .iter()
                .map(|b| b.username.as_str())
                .collect::<Vec<_>>(),
            vec!["app", "batch"]
        );
    }

    #[test]
    fn usernames_must_be_unique_across_config_and_cluster() {
        let err = merge_bindings(&[binding("app", "rw")], &[binding("app", "ro")]).unwrap_err();
        assert_eq!(
            err,
            ResolveError::DuplicateUsername {
                username: "app".into()
            }
        );
    }

    #[test]
    fn bindings_naming_a_missing_role_block() {
        let mut c = seed_menu();
        c.roles.insert(
            "rw".into(),
            ValkeyRoleSpec {
                categories: vec![CategoryRule {
                    name: "read".into(),
                    access: RuleAccess::Allow,
                }],
                commands: vec![],
            },
        );
        assert_eq!(resolve_roles(&c, &[binding("app", "rw")]).unwrap().len(), 1);
        let err = resolve_roles(&c, &[binding("app", "rw"), binding("metrics", "ro")]).unwrap_err();
        assert_eq!(
            err,
            ResolveError::RoleNotFound {
                role: "ro".into(),
                username: "metrics".into()
            }
        );
    }

    #[test]
    fn a_resolution_to_an_older_major_than_members_run_is_refused() {
        let c = seed_menu();
        let resolved = resolve_config(&c, "standard").unwrap(); // valkey 9.0.0
        assert_eq!(
            refuse_major_downgrade(&resolved, ["9.1.2", "9.0.0"]),
            Ok(())
        );
        assert_eq!(refuse_major_downgrade(&resolved, []), Ok(()));
        assert_eq!(
            refuse_major_downgrade(&resolved, ["8.1.4"]),
            Ok(()),
            "upgrades roll"
        );
        let err = refuse_major_downgrade(&resolved, ["9.0.0", "10.0.1"]).unwrap_err();
        assert_eq!(err.reason(), "MajorVersionDowngrade");
        let message = err.to_string();
        assert!(
            message.contains("members run Valkey 10.0.1")
                && message.contains("ValkeyImage \"valkey-9-0\" with Valkey 9.0.0"),
            "{message}"
        );
    }

    #[test]
    fn a_binding_the_api_server_should_have_refused_is_never_rendered() {
        for (username, pattern) in [
            ("app\nuser evil on nopass ~* +@all", "app:*"),
            ("app with space", "app:*"),
            ("_valkey-operator", "app:*"),
            ("app", "app:* ~*"),
        ] {
            let mut b = binding(username, "rw");
            b.permissions[0].keys = vec![crate::api::KeyPermission {
                pattern: pattern.into(),
                access: crate::api::KeyAccess::Readwrite,
            }];
            let err = merge_bindings(&[], &[b]).unwrap_err();
            assert_eq!(err.reason(), "InvalidBinding", "{username:?} {pattern:?}");
            assert!(err.to_string().contains("it is not applied"), "{err}");
        }
        assert!(merge_bindings(&[], &[binding("_svc-reader", "rw")]).is_ok());
    }
}
