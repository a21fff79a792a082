"""Splits docs/quickstart.md into the shell blocks a user runs, in order, each into
<out>/<NN>.sh, with what the test does with it in <out>/<NN>.how:
  run                     run it; it must succeed
  prints: <text>          run it; it must succeed and say <text>
  fails with: <text>      run it; it must fail and say <text>
  skip: <why>             not run (the test says why)
A block's marker is an HTML comment `<!-- quickstart-test: ... -->` on the line before it.

usage: blocks.py <page.md> <out-dir>
"""

import pathlib
import re
import sys

BLOCK = re.compile(
    r"(?:<!-- quickstart-test: (?P<how>.+?) -->\n[ \t]*)?```sh\n(?P<code>.*?)\n[ \t]*```", re.S
)


def main(page: str, out: str) -> None:
    text = pathlib.Path(page).read_text()
    blocks = list(BLOCK.finditer(text))
    if not blocks:
        sys.exit(f"{page}: no sh block")
    for i, m in enumerate(blocks, 1):
        code = m.group("code")
        # A block inside a list item is indented with it.
        indent = min(
            (len(l) - len(l.lstrip()) for l in code.splitlines() if l.strip()), default=0
        )
        code = "\n".join(l[indent:] for l in code.splitlines())
        how = m.group("how") or "run"
        if not re.match(r"run$|prints: .+|fails with: .+|skip: .+", how):
            sys.exit(f"{page}: block {i}: unknown marker {how!r}")
        pathlib.Path(out, f"{i:02}.sh").write_text(code + "\n")
        pathlib.Path(out, f"{i:02}.how").write_text(how + "\n")
    print(len(blocks))


if __name__ == "__main__":
    main(*sys.argv[1:])
