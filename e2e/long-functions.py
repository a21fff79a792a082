#!/usr/bin/env python3
"""Lists the Rust functions under DIR (default src) longer than LIMIT lines (default 80),
counted from the `fn` line to its closing brace; exits 1 when there is one. `make lint` runs it
on src/: a function that long is several steps, each of which deserves a name.

    python3 e2e/long-functions.py [DIR [LIMIT]]

Test code is not counted: items under `#[cfg(test)]` and the files a `#[cfg(test)] mod name;`
pulls in. Braces inside strings, char literals and comments are ignored."""
import re, sys, pathlib

LIMIT = int(sys.argv[2]) if len(sys.argv) > 2 else 80
root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "src")
FN = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+"[^"]*"\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)')

def strip(text):
    """Replace string/char/comment contents with spaces, keeping newlines."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i); j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j
        elif text.startswith('/*', i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith('/*', j): depth += 1; j += 2
                elif text.startswith('*/', j): depth -= 1; j += 2
                else: j += 1
            out.append(''.join(ch if ch == '\n' else ' ' for ch in text[i:j])); i = j
        elif c == 'r' and re.match(r'r#*"', text[i:i+10]) and (i == 0 or not (text[i-1].isalnum() or text[i-1] == '_')):
            m = re.match(r'r(#*)"', text[i:]); hashes = m.group(1)
            end = text.find('"' + hashes, i + len(m.group(0)))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append(''.join(ch if ch == '\n' else ' ' for ch in text[i:end])); i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == '\\' else 1
            out.append(''.join(ch if ch == '\n' else ' ' for ch in text[i:j+1])); i = j + 1
        elif c == "'":
            m = re.match(r"'(\\.|\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|[^\\'])'", text[i:])
            if m: out.append(' ' * len(m.group(0))); i += len(m.group(0))
            else: out.append(c); i += 1   # lifetime
        else:
            out.append(c); i += 1
    return ''.join(out)

def scan(path):
    lines = strip(path.read_text()).split('\n')
    hits, i = [], 0
    while i < len(lines):
        line = lines[i]
        if re.match(r'\s*#\[cfg\(test\)\]', line):
            # skip the next item (a test module or test-only fn) by brace matching
            j, depth, opened = i + 1, 0, False
            while j < len(lines):
                depth += lines[j].count('{') - lines[j].count('}')
                if '{' in lines[j]: opened = True
                if opened and depth <= 0: break
                if not opened and lines[j].rstrip().endswith(';'): break
                j += 1
            i = j + 1; continue
        m = FN.match(line)
        if m:
            j, depth, opened = i, 0, False
            while j < len(lines):
                depth += lines[j].count('{') - lines[j].count('}')
                if '{' in lines[j]: opened = True
                if opened and depth <= 0: break
                if not opened and lines[j].rstrip().endswith(';'): break  # declaration only
                j += 1
            if opened:
                length = j - i + 1
                if length > LIMIT: hits.append((length, i + 1, m.group(7)))
        i += 1
    return hits

def test_module_files(files):
    """Files a `#[cfg(test)] mod name;` declaration pulls in (name.rs or name/mod.rs, next to
    the declaring file, or under its directory when it is not mod.rs/lib.rs/main.rs)."""
    out = set()
    for p in files:
        text = p.read_text()
        for m in re.finditer(r'#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;', text):
            base = p.parent if p.name in ('mod.rs', 'lib.rs', 'main.rs') else p.parent / p.stem
            for c in (base / f"{m.group(1)}.rs", base / m.group(1) / "mod.rs"):
                out.add(c.resolve())
    return out

files = sorted(root.rglob('*.rs'))
skip = test_module_files(files)
bad = []
for p in files:
    if p.resolve() in skip:
        continue
    for length, line, name in scan(p):
        bad.append(f"{p}:{line}: fn {name} is {length} lines")
for line in bad:
    print(line)
if bad:
    print(f"split each into steps with names that say what they do (limit {LIMIT} lines)", file=sys.stderr)
sys.exit(1 if bad else 0)
