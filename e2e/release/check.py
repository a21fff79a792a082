"""Checks what `make release` wrote (e2e/release.sh): each artifact is there, says the version
it is for, and is what it claims to be. Fails naming the artifact and what is wrong.

Usage: check.py RELEASE_DIR VERSION HELM KUBERNETES_VERSION
"""

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile

import yaml

TRIPLE = "x86_64-unknown-linux-gnu"
DOC_DIR = "usr/share/doc/valkey-operator"


def fail(artifact: str, why: str) -> None:
    sys.exit(f"release check failed: {artifact}: {why}")


def sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run(*cmd: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        fail(" ".join(cmd[:3]), f"exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def shipped_crates() -> set:
    """(name, version) of every crate the operator binary is built from: cargo's own answer,
    to hold the SBOM against (normal dependencies, on the release target)."""
    out = run("cargo", "tree", "--locked", "-p", "valkey-operator", "-e", "normal",
              "--target", TRIPLE, "--prefix", "none", "--format", "{p}")
    crates = set()
    for line in out.splitlines():
        name, version = line.split()[:2]
        crates.add((name, version.lstrip("v")))
    return crates


def check_sbom(path: str, name: str, version: str) -> dict:
    bom = json.load(open(path))
    if bom.get("bomFormat") != "CycloneDX" or bom.get("specVersion") != "1.5":
        fail(path, f"not a CycloneDX 1.5 BOM: {bom.get('bomFormat')} {bom.get('specVersion')}")
    subject = bom["metadata"]["component"]
    if (subject["name"], subject["version"]) != (name, version):
        fail(path, f"describes {subject['name']} {subject['version']}, not {name} {version}")
    for component in bom["components"]:
        if not component.get("licenses"):
            fail(path, f"{component['name']} {component['version']} has no license")
    return bom


def check_operator_sbom(out: str, version: str) -> dict:
    path = f"{out}/valkey-operator-{version}.cdx.json"
    bom = check_sbom(path, "valkey-operator", version)
    listed = {(c["name"], c["version"]) for c in bom["components"]}
    built = shipped_crates() - {("valkey-operator", version)}
    if listed != built:
        fail(path, f"leaves out crates the binary is built from: {sorted(built - listed)[:10]}; "
             f"lists crates it is not built from: {sorted(listed - built)[:10]}")
    print(f"ok - SBOM lists all {len(listed)} crates of the operator, each with its license")
    return bom


def check_licenses(out: str, bom: dict) -> None:
    path = f"{out}/licenses.html"
    text = open(path, encoding="utf-8").read()
    for needle in ("Apache License", "Permission is hereby granted"):
        if needle not in text:
            fail(path, f"has no license text containing {needle!r}")
    absent = [c["name"] for c in bom["components"] if f"{c['name']} {c['version']}" not in text]
    if absent:
        fail(path, f"names no license for {absent[:10]}")
    print(f"ok - licenses.html holds the license text for every crate ({len(text) // 1024} KiB)")


def image_files(archive: str) -> dict:
    """The files of the image's layers (path -> bytes), for the paths under DOC_DIR."""
    tar = tarfile.open(archive)
    members = {m.name.removeprefix("./"): m for m in tar.getmembers()}

    def blob(digest: str):
        return tar.extractfile(members["blobs/sha256/" + digest.split(":", 1)[1]])

    index = json.load(tar.extractfile(members["index.json"]))
    manifest = json.load(blob(index["manifests"][0]["digest"]))
    files = {}
    for layer in manifest["layers"]:
        with tarfile.open(fileobj=io.BytesIO(blob(layer["digest"]).read()), mode="r:*") as lt:
            for m in lt.getmembers():
                name = m.name.removeprefix("./")
                if m.isfile() and name.startswith(DOC_DIR):
                    files[name] = lt.extractfile(m).read()
    return files


def check_image(out: str, version: str) -> None:
    archive = f"{out}/valkey-operator-{version}.oci.tar"
    files = image_files(archive)
    expected = {
        f"{DOC_DIR}/sbom.cdx.json": f"{out}/valkey-operator-{version}.cdx.json",
        f"{DOC_DIR}/licenses.html": f"{out}/licenses.html",
        f"{DOC_DIR}/LICENSE": "LICENSE",
    }
    for inside, outside in expected.items():
        if files.get(inside) != open(outside, "rb").read():
            fail(archive, f"/{inside} is missing or differs from {outside}")
    print(f"ok - the image carries its SBOM, the crates' licenses and LICENSE in /{DOC_DIR}")


def check_chart(out: str, version: str, helm: str, kubernetes: str) -> None:
    chart = f"{out}/valkey-operator-{version}.tgz"
    meta = yaml.safe_load(run(helm, "show", "chart", chart))
    if (meta["version"], meta["appVersion"]) != (version, version):
        fail(chart, f"version {meta['version']}, appVersion {meta['appVersion']}")
    run(helm, "lint", chart)
    rendered = run(helm, "template", "valkey-operator", chart, "--namespace",
                   "valkey-operator-system", "--kube-version", kubernetes)
    if f"valkey-operator:{version}" not in rendered:
        fail(chart, f"does not run the operator image of {version}")
    print(f"ok - chart {version} lints and runs image tag {version}")


def check_plugin(out: str, version: str) -> None:
    archive = f"{out}/kubectl-valkey_linux_amd64.tar.gz"
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(archive) as tar:
            if sorted(tar.getnames()) != ["LICENSE", "kubectl-valkey"]:
                fail(archive, f"holds {tar.getnames()}, want kubectl-valkey and LICENSE")
            tar.extractall(tmp, filter="data")
        binary = f"{tmp}/kubectl-valkey"
        if "Requesting program interpreter" in run("readelf", "-l", binary):
            fail(archive, "kubectl-valkey is dynamically linked (it names a loader)")
        said = run(binary, "--version").strip()
        if said != f"kubectl-valkey {version}":
            fail(archive, f"--version says {said!r}")
    sbom = check_sbom(f"{out}/kubectl-valkey-{version}.cdx.json", "kubectl-valkey", version)
    manifest = yaml.safe_load(open(f"{out}/krew/valkey.yaml"))
    platform = manifest["spec"]["platforms"][0]
    if manifest["spec"]["version"] != f"v{version}":
        fail("krew/valkey.yaml", f"version {manifest['spec']['version']}")
    if platform["sha256"] != sha256(archive):
        fail("krew/valkey.yaml", "sha256 is not the plugin archive's")
    if not platform["uri"].endswith("/kubectl-valkey_linux_amd64.tar.gz"):
        fail("krew/valkey.yaml", f"uri {platform['uri']}")
    print(f"ok - plugin: static, prints {said!r}; krew manifest v{version} with the archive's "
          f"sha256; SBOM of {len(sbom['components'])} crates")


def check_sums(out: str) -> None:
    listed = {}
    for line in open(f"{out}/SHA256SUMS"):
        digest, name = line.split()
        listed[name] = digest
    for root, _, names in os.walk(out):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), out)
            if rel != "SHA256SUMS" and listed.get(rel) != sha256(os.path.join(out, rel)):
                fail("SHA256SUMS", f"wrong or no sum for {rel}")
    print(f"ok - SHA256SUMS covers all {len(listed)} artifacts")


def main() -> None:
    out, version, helm, kubernetes = sys.argv[1:5]
    bom = check_operator_sbom(out, version)
    check_licenses(out, bom)
    check_image(out, version)
    check_chart(out, version, helm, kubernetes)
    check_plugin(out, version)
    notes = open(f"{out}/RELEASE-NOTES.md").read()
    if not notes.startswith(f"# valkey-operator {version}\n") or len(notes) < 200:
        fail("RELEASE-NOTES.md", "no title for the version, or no notes")
    print("ok - release notes from CHANGELOG.md")
    check_sums(out)


if __name__ == "__main__":
    main()
