#!/usr/bin/env bash
# Builds the four client programs of docs/connect.md, extracted as the page shows them, into
# <out> (outside the checkout): Python with valkey-py in a venv, Go with valkey-go, Java with
# Lettuce (dependencies by Maven, compiled by javac), Node.js with iovalkey. Dependencies are
# pinned here: requirements.txt, go.mod/go.sum, pom.xml, package.json/package-lock.json.
# Prints `<language> <command...>` lines to <out>/programs, one per program, for the e2e suite
# `clients` to start.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:?usage: prepare.sh <out-dir>}
mkdir -p "$out"/{python,go,java,node}

# The runtimes, from Debian's packages where the machine lacks them (Go comes with the repo's
# toolchain install, e2e/tools/install.sh).
missing=()
command -v javac >/dev/null || missing+=(default-jdk-headless)
command -v mvn >/dev/null || missing+=(maven)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
  echo "[clients] installing ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

python3 "$here/extract.py" "$repo/docs/connect.md" "$out"

# Python: a venv of its own, so the machine's Python is untouched.
[ -x "$out/python/venv/bin/python" ] || python3 -m venv "$out/python/venv"
"$out/python/venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt"
cp "$out/writer.py" "$out/python/"

# Go: the module cache and build cache are Go's own (outside the checkout).
cp "$here/go.mod" "$here/go.sum" "$out/writer.go" "$out/go/"
(cd "$out/go" && go build -mod=readonly -o writer .)

# Java: Lettuce and its dependencies into lib/ (Maven's repository is ~/.m2), then javac.
cp "$here/pom.xml" "$out/java/pom.xml"
(cd "$out/java" && mvn -B -Dstyle.color=never dependency:copy-dependencies -DoutputDirectory=lib \
  -DincludeScope=runtime > mvn.log 2>&1) || { cat "$out/java/mvn.log"; exit 1; }
mkdir -p "$out/java/classes"
javac -Xlint:deprecation -Werror -cp "$out/java/lib/*" -d "$out/java/classes" "$out/Writer.java"

# Node.js: exactly the locked packages.
cp "$here/package.json" "$here/package-lock.json" "$out/writer.js" "$out/node/"
(cd "$out/node" && npm ci --no-audit --no-fund --loglevel=error)

cat > "$out/programs" <<EOF
python $out/python/venv/bin/python $out/python/writer.py
go $out/go/writer
java java -cp $out/java/classes:$out/java/lib/* Writer
node node $out/node/writer.js
EOF
echo "[clients] four programs ready in $out"
