"""Writes each program of docs/connect.md marked `<!-- client-guide: <file> -->` (the fenced
block right after the marker) to <out>/<file>, exactly as the page shows it.

usage: extract.py <page.md> <out-dir>
"""

import pathlib
import re
import sys

MARKED = re.compile(r"<!-- client-guide: (\S+) -->\n```[a-z]*\n(.*?)\n```", re.S)


def main(page: str, out: str) -> None:
    programs = MARKED.findall(pathlib.Path(page).read_text())
    if not programs:
        sys.exit(f"{page}: no `<!-- client-guide: <file> -->` block")
    for name, code in programs:
        path = pathlib.Path(out) / name
        path.write_text(code + "\n")
        print(f"[clients] {name}: {len(code.splitlines())} lines from {page}")


if __name__ == "__main__":
    main(*sys.argv[1:])
