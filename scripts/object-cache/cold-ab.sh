#!/usr/bin/env bash
# Cold read of every file of a tree through a fresh workspace, the host object cache on or off,
# in the order given, each pass after a fresh daemon, an empty host cache and drop_caches; prints
# the wall time, the daemon's CPU (utime + stime) and the bytes it wrote (docs/benchmarks.md,
# "Reads with the host object cache"). Root; a scratch home under /var/tmp/awc-cold-ab.
#   scripts/object-cache/cold-ab.sh /var/tmp/awc-bench/large-tree/share on off on off
set -euo pipefail
SRC=$1
shift
W=/var/tmp/awc-cold-ab
AWC="node $(cd "$(dirname "$0")/../.." && pwd)/dist/src/cli/entry/main.js --home $W/home"
cleanup() {
  $AWC daemon stop --force >/dev/null 2>&1 || true
  for m in $(grep " $W/" /proc/mounts | awk '{print $2}' | sort -r); do umount -l "$m"; done
}
cleanup
rm -rf "$W"
mkdir -p "$W"
$AWC snapshot import "$SRC" --name base --json >/dev/null 2>&1
n=0
for mode in "$@"; do
  n=$((n + 1))
  $AWC daemon stop --force >/dev/null 2>&1 || true
  rm -rf "$W/home/host/cache"
  ws=$($AWC fork base --json | node -e 'console.log(JSON.parse(require("fs").readFileSync(0)).workspaces[0].id)')
  mkdir -p "$W/m$n"
  AWC_OBJECT_CACHE=$mode $AWC mount "$ws" "$W/m$n" >/dev/null
  pid=$(cat "$W/home/host/awcd.pid")
  sync
  echo 3 >/proc/sys/vm/drop_caches
  c0=$(awk '{print $14+$15}' "/proc/$pid/stat")
  s=$(date +%s%N)
  (cd "$W/m$n" && find . -type f -print0 | xargs -0 cat >/dev/null)
  e=$(date +%s%N)
  c1=$(awk '{print $14+$15}' "/proc/$pid/stat")
  echo "object cache $mode: $(((e - s) / 1000000)) ms, daemon CPU $(((c1 - c0) * 10)) ms, $(grep "^write_bytes" "/proc/$pid/io")"
done
cleanup
