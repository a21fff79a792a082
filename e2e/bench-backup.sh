#!/usr/bin/env bash
# make bench-backup: one 1 GiB shard's backup, `valkey-operator backup run` (the snapshot taken
# as a replica takes it and streamed into the bucket) next to `valkey-cli --rdb` followed by a
# plain S3 PUT of the same snapshot: same machine, same SeaweedFS, same valkey-server, release
# build. Then its restore, `valkey-operator backup restore` (the snapshot streamed back and every
# key replayed with RESTORE into an empty cluster-mode valkey-server) next to a plain S3 GET of
# the snapshot followed by a valkey-server loading it from disk. Prints the throughputs, their
# ratios and each process's peak RSS (a Job's memory limit is 128 MiB). Host processes only: no
# local cluster needed.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
source "$REPO/e2e/versions.env"
CACHE=${VALKEY_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/valkey-operator}
bash "$REPO/e2e/tools/install.sh" >/dev/null
WEED=$CACHE/seaweedfs-$SEAWEEDFS_TAG/bin/weed
VALKEY=$CACHE/valkey-9.1.2/bin
BINARY=$(bash "$REPO/e2e/release-build.sh")
D=$(mktemp -d); mkdir -p "$D/weed" "$D/valkey" "$D/restored" "$D/loaded"
cli() { "$VALKEY/valkey-cli" -p 7500 "$@"; }
cli2() { "$VALKEY/valkey-cli" -p 7501 "$@"; }
cli3() { "$VALKEY/valkey-cli" -p 7502 "$@"; }
trap 'cli shutdown nosave >/dev/null 2>&1 || true; cli2 shutdown nosave >/dev/null 2>&1 || true; cli3 shutdown nosave >/dev/null 2>&1 || true; pkill -f "weed mini -dir=$D/weed" || true; sleep 2; rm -rf "$D" 2>/dev/null || true' EXIT
cat > "$D/s3.json" <<'J'
{"identities":[{"name":"b","credentials":[{"accessKey":"AK","secretKey":"SK0123456789"}],"actions":["Read","Write","List","Tagging"]}]}
J
(cd "$D/weed" && "$WEED" mini -dir="$D/weed" -ip=127.0.0.1 -s3.config="$D/s3.json" \
  -master.telemetry=false -admin.ui=false -bucket=valkey-backups > "$D/weed.log" 2>&1 &)
# Uncompressed snapshots: the bytes that cross the wire are the dataset's (DEBUG POPULATE's
# values would compress to 4 %); no diskless-sync delay, for valkey-cli as for the Job.
"$VALKEY/valkey-server" --port 7500 --cluster-enabled yes --enable-debug-command yes --save "" \
  --rdbcompression no --repl-diskless-sync-delay 0 --dir "$D/valkey" --daemonize yes --logfile "$D/valkey.log"
for _ in $(seq 60); do curl -s -o /dev/null http://127.0.0.1:8333 && cli ping >/dev/null 2>&1 && break; sleep 1; done
cli cluster addslotsrange 0 16383 >/dev/null
cli acl setuser _valkey-backup on '>bpw' resetkeys resetchannels -@all +auth +ping +replconf +sync >/dev/null
cli debug populate 1000000 key 1000 >/dev/null
echo "dataset: $(cli dbsize) keys, $(cli info memory | grep '^used_memory_human' | tr -d '\r')"
export AWS_ACCESS_KEY_ID=AK AWS_SECRET_ACCESS_KEY=SK0123456789 VALKEY_USERNAME=_valkey-backup \
  VALKEY_PASSWORD=bpw BACKUP_OUTCOME_FILE="$D/outcome.json"
export BACKUP_PLAN='{"location":{"endpoint":"http://127.0.0.1:8333","bucket":"valkey-backups","region":"us-east-1"},"path":"bench/job","cluster":{"namespace":"n","name":"c","uid":"u"},"backup":"b","backupUid":"u","shards":[{"index":0,"slots":["0-16383"],"member":"m","role":"primary","address":"127.0.0.1:7500"}]}'
/usr/bin/time -v "$BINARY" backup run 2> "$D/time.txt" > /dev/null
t0=$(date +%s.%N)
"$VALKEY/valkey-cli" -p 7500 --user _valkey-backup --pass bpw --rdb "$D/raw.rdb" >/dev/null 2>&1
t1=$(date +%s.%N)
curl -sf --aws-sigv4 "aws:amz:us-east-1:s3" --user AK:SK0123456789 -T "$D/raw.rdb" \
  "http://127.0.0.1:8333/valkey-backups/bench/raw/shard-0.rdb" >/dev/null
t2=$(date +%s.%N)
python3 - "$D" "$t0" "$t1" "$t2" <<'P'
import json, re, sys
d, t0, t1, t2 = sys.argv[1], *map(float, sys.argv[2:])
times = open(f"{d}/time.txt").read()
wall = re.search(r"Elapsed \(wall clock\).*: (\S+)", times).group(1).split(":")
job = sum(float(x) * 60 ** i for i, x in enumerate(reversed(wall)))
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", times).group(1)) / 1024
mb = json.load(open(f"{d}/outcome.json"))["completed"]["shards"][0]["bytes"] / 1e6
raw = t2 - t0
print(f"snapshot {mb:.0f} MB; backup run {job:.1f} s ({mb / job:.0f} MB/s), peak RSS {rss:.1f} MiB")
print(f"valkey-cli --rdb {t1 - t0:.1f} s + S3 PUT {t2 - t1:.1f} s = {raw:.1f} s ({mb / raw:.0f} MB/s); "
      f"backup time / raw time {job / raw:.2f}")
P

# Restore: the same snapshot back into an empty cluster-mode server, key by key.
"$VALKEY/valkey-server" --port 7501 --cluster-enabled yes --save "" --appendonly no \
  --dir "$D/restored" --daemonize yes --logfile "$D/restored.log"
for _ in $(seq 30); do cli2 ping >/dev/null 2>&1 && break; sleep 1; done
cli2 cluster addslotsrange 0 16383 >/dev/null
until cli2 cluster info | grep -q '^cluster_state:ok'; do sleep 0.2; done
cli2 acl setuser _valkey-restore on '>rpw' resetchannels '~*' -@all +auth +ping +restore '+function|load' >/dev/null
export VALKEY_USERNAME=_valkey-restore VALKEY_PASSWORD=rpw BACKUP_OUTCOME_FILE="$D/restored.json"
export RESTORE_PLAN='{"location":{"endpoint":"http://127.0.0.1:8333","bucket":"valkey-backups","region":"us-east-1"},"path":"bench/job","backup":"n/b","cluster":{"namespace":"n","name":"r","uid":"u"},"targets":[{"member":"m","address":"127.0.0.1:7501","slots":["0-16383"]}]}'
/usr/bin/time -v "$BINARY" backup restore 2> "$D/rtime.txt" > /dev/null \
  || { echo "restore failed:"; grep -v '^\s' "$D/rtime.txt" | head -5; exit 1; }
restored_keys=$(cli2 dbsize)
# Raw: GET the snapshot to a file, then a server loads it from disk (until it answers PING
# with the keys in).
t3=$(date +%s.%N)
curl -sf --aws-sigv4 "aws:amz:us-east-1:s3" --user AK:SK0123456789 \
  "http://127.0.0.1:8333/valkey-backups/bench/job/shard-0.rdb" -o "$D/loaded/dump.rdb"
t4=$(date +%s.%N)
"$VALKEY/valkey-server" --port 7502 --save "" --appendonly no --dir "$D/loaded" \
  --dbfilename dump.rdb --daemonize yes --logfile "$D/loaded.log"
until [ "$(cli3 info persistence 2>/dev/null | grep -c '^loading:0')" = 1 ]; do sleep 0.05; done
t5=$(date +%s.%N)
loaded_keys=$(cli3 dbsize)
python3 - "$D" "$t3" "$t4" "$t5" "$restored_keys" "$loaded_keys" <<'P'
import json, re, sys
d, t3, t4, t5 = sys.argv[1], *map(float, sys.argv[2:5])
restored_keys, loaded_keys = int(sys.argv[5]), int(sys.argv[6])
times = open(f"{d}/rtime.txt").read()
wall = re.search(r"Elapsed \(wall clock\).*: (\S+)", times).group(1).split(":")
job = sum(float(x) * 60 ** i for i, x in enumerate(reversed(wall)))
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", times).group(1)) / 1024
out = json.load(open(f"{d}/restored.json"))["completed"]["shards"][0]
mb = out["bytes"] / 1e6
raw = t5 - t3
print(f"restore {out['keys']} keys ({restored_keys} in the server): {job:.1f} s ({mb / job:.0f} MB/s, "
      f"{out['keys'] / job:.0f} keys/s), peak RSS {rss:.1f} MiB")
print(f"S3 GET {t4 - t3:.1f} s + valkey-server loading the file {t5 - t4:.1f} s = {raw:.1f} s "
      f"({mb / raw:.0f} MB/s, {loaded_keys} keys); restore time / raw time {job / raw:.2f}")
assert out["keys"] == restored_keys == loaded_keys, "every key restored"
P
