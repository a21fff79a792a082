//! ValkeyRole: command and category names checked against Valkey's real command table
//! (`data/valkey-commands.txt`, taken from the pinned valkey-server builds with COMMAND INFO and
//! ACL CAT). An unknown name would make Valkey refuse the whole ACL file, so it is **denied**,
//! with "did you mean" suggestions.
//!
//! CONFIG is never granted to a bound user: `CONFIG GET masterauth` returns the password
//! members replicate with, and that user may write any key (atomic slot migration needs it),
//! so a "read-only" role with `config|get` is a writer. The ACL renderer denies `config` at the
//! end of every selector (`resolve/acl.rs`, even when this webhook was not serving); here an
//! explicit `config` rule that allows is **denied** (it would do nothing, and its author meant
//! something), and a category that includes CONFIG (`all`, `admin`, `dangerous`, `slow`) is
//! allowed with a **warning** that CONFIG is withheld.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};

use super::{allow_with_warnings, deny};
use crate::api::{RuleAccess, ValkeyRole, ValkeyRoleSpec};

/// ACL categories that include `config|get` (Valkey 9.0 and 9.1; `all` includes everything).
pub const CATEGORIES_WITH_CONFIG: &[&str] = &["all", "admin", "dangerous", "slow"];

/// Refusals (explicit `config` rules that allow) and warnings (categories that include CONFIG)
/// of a role: CONFIG is withheld from every bound user (see the module's comment).
pub fn config_rules(name: &str, spec: &ValkeyRoleSpec) -> (Vec<String>, Vec<String>) {
    let why = "CONFIG GET returns masterauth, the password members replicate with, which can \
               write any key; the operator withholds CONFIG from every ACL user";
    let refused = spec
        .commands
        .iter()
        .enumerate()
        .filter(|(_, c)| c.access == RuleAccess::Allow)
        .filter(|(_, c)| c.name.to_lowercase() == "config" || c.full_name().starts_with("config|"))
        .map(|(i, c)| {
            format!(
                "spec.commands[{i}]: {:?} is never granted ({why}); remove it (metrics \
                 exporters read INFO)",
                c.full_name()
            )
        })
        .collect();
    let warned = spec
        .categories
        .iter()
        .filter(|c| c.access == RuleAccess::Allow)
        .map(|c| c.name.to_lowercase())
        .filter(|c| CATEGORIES_WITH_CONFIG.contains(&c.as_str()))
        .map(|c| {
            format!("ValkeyRole {name:?} allows @{c}, which includes CONFIG: users bound to it still cannot run CONFIG ({why})")
        })
        .collect();
    (refused, warned)
}

const TABLE: &str = include_str!("../data/valkey-commands.txt");

/// Known command names (`get`, `config|get`) and ACL categories (`read`, `all`).
pub struct CommandTable {
    pub commands: BTreeSet<String>,
    pub categories: BTreeSet<String>,
}

/// The table shipped with the operator.
pub fn table() -> &'static CommandTable {
    static T: OnceLock<CommandTable> = OnceLock::new();
    T.get_or_init(|| {
        let mut commands = BTreeSet::new();
        // `+@all` is valid although ACL CAT does not list it.
        let mut categories = BTreeSet::from(["all".to_string()]);
        let mut section = "";
        for line in TABLE
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            match line {
                "[categories]" | "[commands]" => section = line,
                name if section == "[categories]" => {
                    categories.insert(name.to_string());
                }
                name => {
                    commands.insert(name.to_string());
                }
            }
        }
        CommandTable {
            commands,
            categories,
        }
    })
}

/// Edit distance (insertions, deletions, substitutions).
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Up to three known names nearest to `name` (all at the smallest edit distance found).
pub fn suggestions<'a>(name: &str, known: &'a BTreeSet<String>) -> Vec<&'a str> {
    let limit = if name.len() <= 4 { 1 } else { 2 };
    let mut close: Vec<(usize, &str)> = known
        .iter()
        .map(|k| (distance(name, k), k.as_str()))
        .filter(|(d, _)| *d <= limit)
        .collect();
    close.sort();
    let best = close.first().map_or(0, |(d, _)| *d);
    close
        .into_iter()
        .take_while(|(d, _)| *d == best)
        .take(3)
        .map(|(_, k)| k)
        .collect()
}

fn unknown(kind: &str, field: &str, name: &str, known: &BTreeSet<String>) -> String {
    let hint = match suggestions(name, known).as_slice() {
        [] => String::new(),
        [one] => format!("; did you mean {one:?}?"),
        many => format!(
            "; did you mean one of {}?",
            many.iter()
                .map(|m| format!("{m:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    format!("{field}: {name:?} is not a Valkey {kind}{hint}")
}

/// The rule.
pub fn validate(req: &AdmissionRequest<ValkeyRole>) -> AdmissionResponse {
    let Some(role) = req.object.as_ref() else {
        return allow_with_warnings(req, vec![]);
    };
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return allow_with_warnings(req, vec![]);
    }
    let t = table();
    let mut problems = Vec::new();
    for (i, c) in role.spec.categories.iter().enumerate() {
        if !t.categories.contains(&c.name.to_lowercase()) {
            problems.push(unknown(
                "ACL category (see ACL CAT)",
                &format!("spec.categories[{i}].name"),
                &c.name,
                &t.categories,
            ));
        }
    }
    for (i, c) in role.spec.commands.iter().enumerate() {
        let full = c.full_name();
        if !t.commands.contains(&full) {
            let (what, field) = match (&c.subcommand, c.name.contains('|')) {
                (Some(_), _) => (
                    "command|subcommand",
                    format!("spec.commands[{i}] (name|subcommand)"),
                ),
                (None, true) => ("command|subcommand", format!("spec.commands[{i}].name")),
                (None, false) => ("command", format!("spec.commands[{i}].name")),
            };
            problems.push(unknown(what, &field, &full, &t.commands));
        }
    }
    let name = role.metadata.name.clone().unwrap_or_default();
    let (refused, mut warnings) = config_rules(&name, &role.spec);
    problems.extend(refused);
    if role.spec.categories.is_empty() && role.spec.commands.is_empty() {
        warnings.push(format!(
            "ValkeyRole {:?} has no rules: users bound to it can run no command",
            role.metadata.name.clone().unwrap_or_default()
        ));
    }
    if problems.is_empty() {
        allow_with_warnings(req, warnings)
    } else {
        deny(req, problems.join("; "), vec![])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::admission::fixtures::request;

    #[test]
    fn the_table_holds_commands_subcommands_and_categories() {
        let t = table();
        for c in [
            "get",
            "set",
            "config|get",
            "cluster|slots",
            "client|setname",
            "acl|whoami",
            "ping",
            "info",
        ] {
            assert!(t.commands.contains(c), "{c}");
        }
        for c in [
            "read",
            "write",
            "keyspace",
            "dangerous",
            "connection",
            "all",
        ] {
            assert!(t.categories.contains(c), "{c}");
        }
        assert!(t.commands.len() > 300);
    }

    #[test]
    fn the_sample_roles_are_accepted() {
        let req = request::<ValkeyRole>("valkeyrole-create.json", |_| {});
        let resp = validate(&req);
        assert!(resp.allowed, "{:?}", resp.result);
    }

    #[test]
    fn an_unknown_command_is_denied_with_a_suggestion() {
        let req = request::<ValkeyRole>("valkeyrole-create.json", |v| {
            v["request"]["object"]["spec"]["commands"][0]["name"] = "hgetal".into()
        });
        let resp = validate(&req);
        assert!(!resp.allowed);
        assert!(
            resp.result.message.contains("spec.commands[0].name: \"hgetal\" is not a Valkey command; did you mean \"hgetall\"?"),
            "{}",
            resp.result.message
        );
    }

    #[test]
    fn an_unknown_subcommand_and_category_are_denied() {
        let req = request::<ValkeyRole>("valkeyrole-create.json", |v| {
            v["request"]["object"]["spec"]["commands"][0]["name"] = "config|gett".into();
            v["request"]["object"]["spec"]["categories"][0]["name"] = "reads".into();
        });
        let resp = validate(&req);
        assert!(!resp.allowed);
        let m = resp.result.message;
        assert!(
            m.contains(
                "\"config|gett\" is not a Valkey command|subcommand; did you mean \"config|get\"?"
            ),
            "{m}"
        );
        assert!(
            m.contains("spec.categories[0].name: \"reads\" is not a Valkey ACL category"),
            "{m}"
        );
        assert!(m.contains("did you mean \"read\"?"), "{m}");
    }

    #[test]
    fn an_explicit_config_rule_that_allows_is_denied_and_one_that_denies_is_accepted() {
        for (name, sub) in [
            ("config|get", None),
            ("CONFIG", Some("get")),
            ("config", None),
        ] {
            let req = request::<ValkeyRole>("valkeyrole-create.json", |v| {
                v["request"]["object"]["spec"]["commands"][0]["name"] = name.into();
                if let Some(sub) = sub {
                    v["request"]["object"]["spec"]["commands"][0]["subcommand"] = sub.into();
                }
            });
            let resp = validate(&req);
            assert!(!resp.allowed, "{name} {sub:?}");
            let m = resp.result.message;
            assert!(
                m.contains("spec.commands[0]") && m.contains("masterauth"),
                "{m}"
            );
        }
        let req = request::<ValkeyRole>("valkeyrole-create.json", |v| {
            v["request"]["object"]["spec"]["commands"][0]["name"] = "config|get".into();
            v["request"]["object"]["spec"]["commands"][0]["access"] = "deny".into();
        });
        assert!(validate(&req).allowed);
    }

    #[test]
    fn a_category_that_includes_config_is_allowed_with_a_warning() {
        let req = request::<ValkeyRole>("valkeyrole-create.json", |v| {
            v["request"]["object"]["spec"]["categories"][0]["name"] = "admin".into();
        });
        let resp = validate(&req);
        assert!(resp.allowed, "{:?}", resp.result);
        let warnings = resp.warnings.unwrap_or_default();
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("allows @admin") && w.contains("cannot run CONFIG")),
            "{warnings:?}"
        );
        // The sample's `dangerous: deny` warns of nothing.
        let req = request::<ValkeyRole>("valkeyrole-create.json", |_| {});
        assert!(validate(&req).warnings.unwrap_or_default().is_empty());
    }

    #[test]
    fn far_off_names_get_no_suggestion() {
        let t = table();
        assert!(suggestions("zzzzzzzzzz", &t.commands).is_empty());
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
