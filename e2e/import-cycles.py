#!/usr/bin/env python3
"""Fails when files of a Rust crate import each other in a cycle.

Usage: import-cycles.py SRC_DIR
       import-cycles.py --expect a.rs,b/c.rs FIXTURE_SRC_DIR   (passes only when exactly that
       cycle is found: the check of the checker, on a fixture that holds a known cycle)

Every path that starts with `crate::`, `super::` or `self::`, a child module's name, or a
name a `use` bound to a module, outside comments, strings and `#[cfg(test)]` items, is an
edge from the file it is written in to the file of the module it names (the longest prefix
that is a module). A strongly connected set of more than one file is a cycle; each is
printed with one loop through it, and the exit status is 1.
"""
import os
import re
import sys


def module_files(root):
    files = {}
    for d, _, names in os.walk(root):
        for name in names:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(d, name)
            parts = os.path.relpath(path, root)[:-3].split(os.sep)
            if parts[-1] == "mod" or (len(parts) == 1 and parts[0] in ("lib", "main")):
                parts = parts[:-1]
            files[tuple(parts)] = path
    return files


def strip(text):
    """Comments and string/char literals out, newlines kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    out.append("\n" if text[i] == "\n" else "")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 40]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            out.append('""')
            i = n if end < 0 else end + 1 + len(hashes)
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            out.append('""')
            i += 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 12]) or (c == "'" and re.match(r"'\\(x..|u\{[0-9a-fA-F]+\})'", text[i:i + 12])):
            m = re.match(r"'(\\x..|\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_test_items(text):
    """Removes each item under `#[cfg(test)]` (a `mod tests { .. }`, a `use`, a fn)."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]", text)
        if not m:
            return text
        i = m.end()
        depth = 0
        while i < len(text):
            ch = text[i]
            if ch == ";" and depth == 0:
                i += 1
                break
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    i += 1
                    break
            i += 1
        text = text[: m.start()] + text[i:]


def expand_use(tree):
    """`a::{b, c::{d, e as f}}` -> [(["a", "b"], None), (["a", "c", "d"], None), (["a", "c", "e"], "f")]."""
    tree = re.sub(r"\s+", " ", tree).strip()
    results = []

    def walk(prefix, s):
        s = s.strip()
        brace = s.find("{")
        if brace < 0:
            m = re.fullmatch(r"(.*?)(?:\s+as\s+(\w+))?", s)
            path = [p.strip() for p in m.group(1).split("::") if p.strip()]
            results.append((prefix + path, m.group(2)))
            return
        head = [p.strip() for p in s[:brace].split("::") if p.strip()]
        body = s[brace + 1 : s.rfind("}")]
        depth, start = 0, 0
        for k, ch in enumerate(body + ","):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                part = body[start:k]
                start = k + 1
                if part.strip():
                    walk(prefix + head, part)

    walk([], tree)
    return results


def resolve(files, here, path, aliases):
    """Module file named by `path` written in module `here`, or None for other crates."""
    if not path:
        return None
    first = path[0]
    if first == "crate":
        base, rest = (), path[1:]
    elif first in ("super", "self"):
        base, rest = here, path
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                base = base[:-1]
            rest = rest[1:]
    elif here + (first,) in files:
        base, rest = here + (first,), path[1:]
    elif first in aliases:
        base, rest = aliases[first], path[1:]
    else:
        return None
    best = base if base in files else None
    cur = base
    for seg in rest:
        cur = cur + (seg,)
        if cur in files:
            best = cur
        else:
            break
    return best


USE = re.compile(r"\buse\s+([^;]+);")
PATH = re.compile(r"(?<![\w:])((?:[A-Za-z_]\w*)(?:::[A-Za-z_]\w*)+)")


def edges_of(files, mod, path):
    """{module it imports: the first path that names it} for the file of module `mod`."""
    text = drop_test_items(strip(open(path, encoding="utf-8").read()))
    out, aliases = {}, {}
    for m in USE.finditer(text):
        for full, alias in expand_use(m.group(1)):
            target = resolve(files, mod, full, aliases)
            if target is None:
                continue
            if target != mod:
                out.setdefault(target, "use " + "::".join(full))
            # `use a::b;` where `b` is a module binds `b` (or its alias) to it for later paths.
            if full[-1] not in ("self", "*") and target[-1:] == (full[-1],):
                aliases[alias or full[-1]] = target
            elif full[-1] == "self" and len(full) > 1:
                aliases[alias or full[-2]] = target
    body = USE.sub(";", text)
    for m in PATH.finditer(body):
        target = resolve(files, mod, m.group(1).split("::"), aliases)
        if target is not None and target != mod:
            out.setdefault(target, m.group(1))
    return out


def cycles(graph):
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                sccs.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sccs


def one_loop(graph, scc):
    """A shortest loop through the first file of the set, for the message."""
    members, start = set(scc), scc[0]
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w == start:
                    loop = [v]
                    while prev[loop[-1]] is not None:
                        loop.append(prev[loop[-1]])
                    return list(reversed(loop)) + [start]
                if w in members and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return scc


def main():
    args = sys.argv[1:]
    expect = None
    if args[:1] == ["--expect"]:
        expect, args = sorted(args[1].split(",")), args[2:]
    root = args[0]
    files = module_files(root)
    graph = {mod: edges_of(files, mod, path) for mod, path in files.items()}
    found = cycles(graph)
    name = lambda m: os.path.relpath(files[m], root)
    for scc in found:
        print(f"import cycle of {len(scc)} files in {root}: " + ", ".join(name(m) for m in scc))
        loop = one_loop(graph, scc)
        for a, b in zip(loop, loop[1:]):
            print(f"  {name(a)} -> {name(b)}  ({graph[a][b]})")
    if expect is not None:
        got = [sorted(name(m) for m in scc) for scc in found]
        if got == [expect]:
            print(f"the checker finds exactly the known cycle of {root}: {', '.join(expect)}")
            return 0
        print(f"expected exactly one cycle, {', '.join(expect)}; found {got}")
        return 1
    if found:
        print("Break each cycle: move what both sides need into a lower module that imports neither.")
        return 1
    print(f"no import cycle among {len(files)} files of {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
