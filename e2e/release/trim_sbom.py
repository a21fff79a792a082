"""Trims a cargo-cyclonedx SBOM to the crates the binary is really built from.

cargo-cyclonedx reads `cargo metadata`, which resolves features over the whole workspace: a
feature the test crate (valkey-e2e) turns on, such as fred's DNS resolver, brings its crates
into the operator's SBOM although `cargo build --bin valkey-operator` never compiles them.
`cargo tree -p valkey-operator -e normal` is cargo's answer for the operator alone; the
components (and their dependency entries) it does not list are dropped, and the count of
both is printed.

Usage: trim_sbom.py SBOM TARGET_TRIPLE   (rewrites SBOM in place)
"""

import json
import subprocess
import sys


def built_crates(triple: str) -> set:
    out = subprocess.run(
        ["cargo", "tree", "--locked", "-p", "valkey-operator", "-e", "normal", "--target",
         triple, "--prefix", "none", "--format", "{p}"],
        capture_output=True, text=True, check=True).stdout
    return {(line.split()[0], line.split()[1].lstrip("v")) for line in out.splitlines()}


def main() -> None:
    path, triple = sys.argv[1], sys.argv[2]
    bom = json.load(open(path))
    built = built_crates(triple)
    kept, dropped = [], []
    for component in bom["components"]:
        key = (component["name"], component["version"])
        (kept if key in built else dropped).append(component)
    gone = {c["bom-ref"] for c in dropped}
    bom["components"] = kept
    bom["dependencies"] = [
        {**d, "dependsOn": [r for r in d.get("dependsOn", []) if r not in gone]}
        for d in bom["dependencies"] if d["ref"] not in gone
    ]
    json.dump(bom, open(path, "w"), indent=2)
    names = ", ".join(sorted(f"{c['name']} {c['version']}" for c in dropped)) or "none"
    print(f"{path}: {len(kept)} crates kept; not built, dropped: {names}", file=sys.stderr)


if __name__ == "__main__":
    main()
