//! ValkeyRole: command and category names checked against Valkey's real command table
//! (`data/valkey-commands.txt`, taken from the pinned valkey-server builds with COMMAND INFO and
//! ACL CAT). An unknown name would make Valkey refuse the whole ACL file, so it is **denied**,
//! with "did you mean" suggestions.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};

use super::{allow_with_warnings, deny};
use crate::api::ValkeyRole;

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
    let mut warnings = Vec::new();
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
    fn far_off_names_get_no_suggestion() {
        let t = table();
        assert!(suggestions("zzzzzzzzzz", &t.commands).is_empty());
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
