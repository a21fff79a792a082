//! `crds/` and the chart's copy (`charts/valkey-operator/files/crds/`) must be exactly what the
//! Rust types generate.

use std::collections::BTreeSet;
use std::path::Path;

use valkey_operator::api::crd;

const REGENERATE: &str = "regenerate with: make crds";

#[test]
fn checked_in_crds_match_the_rust_types() {
    check_dir("crds");
}

#[test]
fn the_charts_crds_match_the_rust_types() {
    check_dir("charts/valkey-operator/files/crds");
}

fn check_dir(relative: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    let mut expected_files = BTreeSet::new();
    for definition in crd::all() {
        let file = crd::file_name(&definition);
        let path = dir.join(&file);
        let on_disk = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{relative}/{file} is missing ({e}); {REGENERATE}"));
        assert!(
            on_disk == crd::to_yaml(&definition),
            "{relative}/{file} is out of date with the Rust types in src/api; {REGENERATE}"
        );
        expected_files.insert(file);
    }
    let present: BTreeSet<String> = std::fs::read_dir(&dir)
        .expect("the CRD directory exists")
        .map(|e| {
            e.expect("readable entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".yaml"))
        .collect();
    let stale: Vec<_> = present.difference(&expected_files).collect();
    assert!(
        stale.is_empty(),
        "{relative} holds files no type generates: {stale:?}; {REGENERATE}"
    );
}

#[test]
fn crd_subcommand_output_is_all_crds() {
    let all = crd::all_yaml();
    assert_eq!(all.matches("kind: CustomResourceDefinition").count(), 8);
    for name in [
        "valkeyimages",
        "valkeyconfigs",
        "valkeyroles",
        "valkeyclusters",
        "valkeynodes",
        "valkeymeteringrecords",
        "valkeybackuplocations",
        "valkeybackups",
    ] {
        assert!(
            all.contains(&format!("name: {name}.valkey.gomomento.com")),
            "{name} missing"
        );
    }
}
