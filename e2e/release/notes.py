"""Release notes (make release): the CHANGELOG.md section of a version, or of `Unreleased`
when the version has none yet, under a title naming the version.

Usage: notes.py CHANGELOG.md VERSION > RELEASE-NOTES.md
"""

import re
import sys


def section(changelog: str, version: str) -> str:
    """The body of the `## <version>` (or `## [<version>]`, `## v<version> - date`) section,
    else of `## Unreleased`; the error names what it looked for."""
    heads = list(re.finditer(r"^## +\[?v?([^\]\s]+)\]?.*$", changelog, re.M))
    for wanted in (version, "Unreleased"):
        for i, head in enumerate(heads):
            if head.group(1) == wanted:
                end = heads[i + 1].start() if i + 1 < len(heads) else len(changelog)
                return changelog[head.end():end].strip()
    sys.exit(f"CHANGELOG.md has no '## {version}' or '## Unreleased' section")


def main() -> None:
    path, version = sys.argv[1], sys.argv[2]
    body = section(open(path, encoding="utf-8").read(), version)
    if not body:
        sys.exit(f"the CHANGELOG.md section for {version} is empty")
    print(f"# valkey-operator {version}\n\n{body}\n")


if __name__ == "__main__":
    main()
