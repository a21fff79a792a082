//! Shared test data for the API tests: valid objects and a table of invalid ones.
#![allow(dead_code)]

use serde_json::{Value, json};

pub const HASH_A: &str = "3a47b49206dbbab1a5ea53a2e6fd5dd726be507a4456195507672072988b520a";

pub fn image(name: &str) -> Value {
    json!({
        "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyImage",
        "metadata": {"name": name},
        "spec": {"repository": "valkey/valkey", "tag": "9.0.0", "version": "9.0.0"}
    })
}

pub fn config(name: &str) -> Value {
    json!({
        "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyConfig",
        "metadata": {"name": name},
        "spec": {
            "imageRef": "valkey-9-0",
            "resources": {"cpu": "1", "memory": "2Gi"},
            "valkey": {"maxmemory": "1500mb", "maxmemory-policy": "allkeys-lru"},
            "acl": [binding("metrics")]
        }
    })
}

pub fn role(name: &str) -> Value {
    json!({
        "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyRole",
        "metadata": {"name": name},
        "spec": {
            "categories": [{"name": "read", "access": "allow"}],
            "commands": [{"name": "client|list", "access": "allow"}, {"name": "keys", "access": "deny"}]
        }
    })
}

pub fn binding(username: &str) -> Value {
    json!({
        "username": username,
        "passwordHashes": [HASH_A],
        "permissions": [{
            "roleRef": "cache-readwrite",
            "keys": [{"pattern": "app:*", "access": "readwrite"}],
            "channels": [{"pattern": "events:*"}]
        }]
    })
}

pub fn cluster(name: &str, namespace: &str) -> Value {
    json!({
        "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyCluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "configRef": "standard", "shards": 3, "replicasPerShard": 1,
            "acl": [binding("app")],
            "placement": {"zones": ["zone-a", "zone-b"], "nodeSelector": {"kubernetes.io/os": "linux"}, "zoneSpread": "bestEffort"},
            "podAnnotations": {"prometheus.io/scrape": "true"}
        },
        // Past creation: its spec may change (MOMENTO-V09.md section 6).
        "status": {"state": "Active"}
    })
}

pub fn node(name: &str, namespace: &str) -> Value {
    json!({
        "apiVersion": "valkey.gomomento.com/v1alpha1", "kind": "ValkeyNode",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "clusterName": "my-cluster", "shard": 0, "roleHint": "primary",
            "configRef": "standard", "imageRef": "valkey-9-0",
            "image": "valkey/valkey:9.0.0", "version": "9.0.0",
            "resources": {"cpu": "1", "memory": "2Gi"},
            "valkey": {"maxmemory": "1500mb"},
            "placement": {"zones": ["zone-a"], "zoneSpread": "required"}
        }
    })
}

/// Set the value at a JSON pointer (creating objects on the way), or remove it with `None`.
pub fn with(mut object: Value, pointer: &str, value: Option<Value>) -> Value {
    let unescape = |part: &str| part.replace("~1", "/").replace("~0", "~");
    let (parent, last) = pointer.rsplit_once('/').expect("pointer has a parent");
    let last = unescape(last);
    let last = last.as_str();
    let mut target = &mut object;
    for part in parent.split('/').skip(1) {
        target = match target {
            Value::Array(items) => &mut items[part.parse::<usize>().expect("array index")],
            Value::Object(map) => map.entry(unescape(part)).or_insert_with(|| json!({})),
            _ => panic!("{pointer}: cannot descend into a scalar"),
        };
    }
    match (target, value) {
        (Value::Object(map), Some(v)) => {
            map.insert(last.to_string(), v);
        }
        (Value::Object(map), None) => {
            map.remove(last);
        }
        (Value::Array(items), Some(v)) => {
            let index = last.parse::<usize>().expect("index");
            if index == items.len() {
                items.push(v);
            } else {
                items[index] = v;
            }
        }
        _ => panic!("{pointer}: unsupported"),
    }
    object
}

/// One invalid object: what is wrong, the object, the field path the rejection must name and
/// whether the rule is a CEL rule (checked client-side in unit tests too).
pub struct Invalid {
    pub name: &'static str,
    pub object: Value,
    pub field: &'static str,
    pub cel: bool,
}

fn case(name: &'static str, object: Value, field: &'static str, cel: bool) -> Invalid {
    Invalid {
        name,
        object,
        field,
        cel,
    }
}

/// Invalid objects for create. Names are placeholders (`NAME`, namespace `NS`); the e2e test
/// substitutes unique ones.
pub fn invalid_creates() -> Vec<Invalid> {
    let img = || image("NAME");
    let cfg = || config("NAME");
    let rl = || role("NAME");
    let cl = || cluster("NAME", "NS");
    let nd = || node("NAME", "NS");
    let s = |v: &str| Some(json!(v));
    vec![
        // ValkeyImage
        case(
            "image repository with a tag",
            with(img(), "/spec/repository", s("valkey/valkey:9.0")),
            "spec.repository",
            true,
        ),
        case(
            "image repository uppercase path",
            with(img(), "/spec/repository", s("Valkey/Valkey")),
            "spec.repository",
            true,
        ),
        case(
            "image tag with a space",
            with(img(), "/spec/tag", s("9.0 latest")),
            "spec.tag",
            true,
        ),
        case(
            "image tag starting with a dot",
            with(img(), "/spec/tag", s(".9")),
            "spec.tag",
            true,
        ),
        case(
            "image version empty",
            with(img(), "/spec/version", s("")),
            "spec.version",
            false,
        ),
        case(
            "image digest not sha256",
            with(img(), "/spec/digest", s("md5:abc")),
            "spec.digest",
            true,
        ),
        case(
            "image version missing",
            with(img(), "/spec/version", None),
            "spec.version",
            false,
        ),
        // ValkeyConfig
        case(
            "config baseRef is itself",
            with(cfg(), "/spec/baseRef", s("NAME")),
            "spec.baseRef",
            true,
        ),
        case(
            "config baseRef not a DNS name",
            with(cfg(), "/spec/baseRef", s("Standard_Base")),
            "spec.baseRef",
            true,
        ),
        case(
            "config imageRef not a DNS name",
            with(cfg(), "/spec/imageRef", s("valkey 9")),
            "spec.imageRef",
            true,
        ),
        case(
            "config uppercase setting key",
            with(cfg(), "/spec/valkey/PORT", s("7000")),
            "spec.valkey",
            true,
        ),
        case(
            "config multi-line setting value",
            with(cfg(), "/spec/valkey/maxmemory", s("1gb\nport 7000")),
            "spec.valkey",
            true,
        ),
        case(
            "config cpu not a quantity",
            with(cfg(), "/spec/resources/cpu", s("one")),
            "spec.resources.cpu",
            true,
        ),
        case(
            "config cpu zero",
            with(cfg(), "/spec/resources/cpu", s("0")),
            "spec.resources.cpu",
            true,
        ),
        case(
            "config memory not a quantity",
            with(cfg(), "/spec/resources/memory", s("2GB")),
            "spec.resources.memory",
            true,
        ),
        case(
            "config acl duplicate username",
            with(cfg(), "/spec/acl/1", Some(binding("metrics"))),
            "spec.acl",
            true,
        ),
        case(
            "config acl username starting with a dash",
            with(cfg(), "/spec/acl/0/username", s("-metrics")),
            "spec.acl[0].username",
            true,
        ),
        case(
            "config acl username over 128 characters",
            with(cfg(), "/spec/acl/0/username", Some(json!("u".repeat(129)))),
            "spec.acl[0].username",
            false,
        ),
        case(
            "config acl username with space",
            with(cfg(), "/spec/acl/0/username", s("metrics user")),
            "spec.acl[0].username",
            true,
        ),
        case(
            "config acl username reserved prefix",
            with(cfg(), "/spec/acl/0/username", s("_valkey-operator")),
            "spec.acl[0].username",
            true,
        ),
        case(
            "config acl hash not hex",
            with(
                cfg(),
                "/spec/acl/0/passwordHashes",
                Some(json!(["not-a-hash"])),
            ),
            "spec.acl[0].passwordHashes",
            true,
        ),
        case(
            "config acl hash uppercase",
            with(
                cfg(),
                "/spec/acl/0/passwordHashes",
                Some(json!([HASH_A.to_uppercase()])),
            ),
            "spec.acl[0].passwordHashes",
            true,
        ),
        case(
            "config acl no password hash",
            with(cfg(), "/spec/acl/0/passwordHashes", Some(json!([]))),
            "spec.acl[0].passwordHashes",
            false,
        ),
        case(
            "config acl no permissions",
            with(cfg(), "/spec/acl/0/permissions", Some(json!([]))),
            "spec.acl[0].permissions",
            false,
        ),
        case(
            "config acl roleRef not a DNS name",
            with(cfg(), "/spec/acl/0/permissions/0/roleRef", s("Cache RW")),
            "spec.acl[0].permissions[0].roleRef",
            true,
        ),
        case(
            "config acl key access invalid",
            with(cfg(), "/spec/acl/0/permissions/0/keys/0/access", s("rw")),
            "spec.acl[0].permissions[0].keys[0].access",
            false,
        ),
        case(
            "config acl key pattern with space",
            with(
                cfg(),
                "/spec/acl/0/permissions/0/keys/0/pattern",
                s("app *"),
            ),
            "spec.acl[0].permissions[0].keys[0].pattern",
            true,
        ),
        case(
            "role subcommand both in name and in subcommand",
            with(
                with(rl(), "/spec/commands/0/name", s("config|get")),
                "/spec/commands/0/subcommand",
                s("get"),
            ),
            "spec.commands[0]",
            true,
        ),
        case(
            "role subcommand with a space",
            with(rl(), "/spec/commands/0/subcommand", s("in fo")),
            "spec.commands[0].subcommand",
            true,
        ),
        case(
            "role command with two subcommands",
            with(rl(), "/spec/commands/0/name", s("config|get|x")),
            "spec.commands[0].name",
            true,
        ),
        case(
            "role category with @",
            with(rl(), "/spec/categories/0/name", s("@read")),
            "spec.categories[0].name",
            true,
        ),
        case(
            "role access invalid",
            with(rl(), "/spec/commands/0/access", s("permit")),
            "spec.commands[0].access",
            false,
        ),
        case(
            "role duplicate command",
            with(rl(), "/spec/commands/1/name", s("client|list")),
            "spec.commands",
            true,
        ),
        // ValkeyCluster
        case(
            "cluster shards zero",
            with(cl(), "/spec/shards", Some(json!(0))),
            "spec.shards",
            false,
        ),
        case(
            "cluster shards too many",
            with(cl(), "/spec/shards", Some(json!(501))),
            "spec.shards",
            false,
        ),
        case(
            "cluster replicasPerShard negative",
            with(cl(), "/spec/replicasPerShard", Some(json!(-1))),
            "spec.replicasPerShard",
            false,
        ),
        case(
            "cluster with more than 1000 members",
            with(cl(), "/spec/replicasPerShard", Some(json!(100_000))),
            "spec.replicasPerShard",
            true,
        ),
        case(
            "cluster configRef missing",
            with(cl(), "/spec/configRef", None),
            "spec.configRef",
            false,
        ),
        case(
            "cluster configRef not a DNS name",
            with(cl(), "/spec/configRef", s("Standard!")),
            "spec.configRef",
            true,
        ),
        case(
            "cluster name too long",
            with(
                cl(),
                "/metadata/name",
                s("a-very-long-valkey-cluster-name-that-exceeds-forty"),
            ),
            "metadata.name",
            false,
        ),
        case(
            "cluster name starts with digit",
            with(cl(), "/metadata/name", s("1cluster")),
            "metadata.name",
            true,
        ),
        case(
            "cluster reserved pod annotation",
            with(
                cl(),
                "/spec/podAnnotations/valkey.gomomento.com~1spec-hash",
                s("x"),
            ),
            "spec.podAnnotations",
            true,
        ),
        case(
            "cluster pod annotation key invalid",
            with(cl(), "/spec/podAnnotations/bad key", s("x")),
            "spec.podAnnotations",
            true,
        ),
        case(
            "cluster zoneSpread invalid",
            with(cl(), "/spec/placement/zoneSpread", s("always")),
            "spec.placement.zoneSpread",
            false,
        ),
        case(
            "cluster zone empty",
            with(cl(), "/spec/placement/zones", Some(json!([""]))),
            "spec.placement.zones",
            true,
        ),
        case(
            "cluster duplicate zone",
            with(
                cl(),
                "/spec/placement/zones",
                Some(json!(["zone-a", "zone-a"])),
            ),
            "spec.placement.zones",
            false,
        ),
        case(
            "cluster nodeSelector value invalid",
            with(cl(), "/spec/placement/nodeSelector/disk", s("fast ssd")),
            "spec.placement.nodeSelector",
            true,
        ),
        case(
            "cluster tls secretRef invalid",
            with(cl(), "/spec/tls", Some(json!({"secretRef": "My_Secret"}))),
            "spec.tls.secretRef",
            true,
        ),
        case(
            "cluster acl duplicate username",
            with(cl(), "/spec/acl/1", Some(binding("app"))),
            "spec.acl",
            true,
        ),
        case(
            "cluster acl too many hashes",
            with(
                cl(),
                "/spec/acl/0/passwordHashes",
                Some(json!(
                    (0..9).map(|i| format!("{i:064x}")).collect::<Vec<_>>()
                )),
            ),
            "spec.acl[0].passwordHashes",
            false,
        ),
        // ValkeyNode
        case(
            "node shard negative",
            with(nd(), "/spec/shard", Some(json!(-1))),
            "spec.shard",
            false,
        ),
        case(
            "node roleHint invalid",
            with(nd(), "/spec/roleHint", s("leader")),
            "spec.roleHint",
            false,
        ),
    ]
}
