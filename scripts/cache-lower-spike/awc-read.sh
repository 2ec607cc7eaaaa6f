#!/bin/bash
# Spike (docs/explanation/host-cache-lower.md), question 5 with AWC itself: cold read of every
# file (`find -type f -print0 | xargs -0 cat > /dev/null` after `sync; echo 3 > drop_caches`)
#   native  the tree itself
#   awc     an AWC workspace as it is today (lowerdir=LAYER::CONTENT, CONTENT the content FUSE
#           mount), after one full read, so that every chunk is in the host's chunk cache on disk
#   cache   the same LAYER and the same live content FUSE mount with CACHE between them:
#           lowerdir=LAYER::CACHE::CONTENT, CACHE holding every content (make-layer.py's cache/)
#   empty   the same with an empty CACHE: what the extra lower costs a file not in it
# VARIANTS (default "native awc cache") picks some; FILLED=1 skips the first read (chunk cache
# already filled by an earlier run).
# and checks that a name missing from CACHE is read from the content FUSE mount.
# Usage: awc-read.sh TREE AWC_MOUNT CACHE [ROUNDS]   (AWC_MOUNT: a mounted AWC workspace of TREE)
set -eu
T=$1; AM=$2; CACHE=$3; R=${4:-3}; W=$(dirname "$CACHE")/ar; mkdir -p "$W"/{mnt,u,w}
opts=$(awk -v m="$AM" '$2 == m && $3 == "overlay" {print $4}' /proc/mounts | tr ',' '\n')
LAYER=$(echo "$opts" | sed -n 's/^lowerdir=\(.*\)::.*/\1/p'); CONTENT=$(echo "$opts" | sed -n 's/^lowerdir=.*::\(.*\)/\1/p')
echo "layer $LAYER; content $CONTENT"
VARIANTS=${VARIANTS:-native awc cache}; mkdir -p "$W/empty"
ovl() { umount "$W/mnt" 2> /dev/null || true; rm -rf "$W/u" "$W/w"; mkdir "$W/u" "$W/w"
  mount -t overlay overlay -o "nodev,nosuid,lowerdir=$LAYER::${1:-$CACHE}::$CONTENT,upperdir=$W/u,workdir=$W/w,metacopy=on,redirect_dir=on" "$W/mnt"; }
readall() { (cd "$1" && find . -type f -print0 | xargs -0 cat > /dev/null); }
home=$(dirname "$(dirname "$CONTENT")")
[ "${FILLED:-}" = 1 ] || {
echo "first read through the AWC workspace (fills the chunk cache): $( { /usr/bin/time -f %e bash -c "cd '$AM' && find . -type f -print0 | xargs -0 cat > /dev/null"; } 2>&1 ) s"
sleep 20  # write-behind
}
echo "chunk cache on disk: $(du -s -BM "$home/host/cache" | cut -f1)"

echo "== fallback: a name missing from CACHE is read from the content FUSE mount"
f=$(cd "$T" && find . -type f -size +100k | head -1); short=$(getfattr --only-values -n trusted.overlay.redirect "$LAYER/$f" | tr -d /)
mv "$CACHE/$short" "$W/held"; ovl; sync; echo 3 > /proc/sys/vm/drop_caches
if cmp -s "$T/$f" "$W/mnt/$f"; then echo "  $f ($short) missing from CACHE: same bytes as the tree"; else echo "  $f: DIFFERENT"; fi
mv "$W/held" "$CACHE/$short"; umount "$W/mnt"

declare -A S
for r in $(seq 1 "$R"); do
  for v in $VARIANTS; do
    case $v in native) d=$T ;; awc) d=$AM ;; cache) ovl; d=$W/mnt ;; empty) ovl "$W/empty"; d=$W/mnt ;; esac
    load=$(cut -d' ' -f1-3 /proc/loadavg); sync; echo 3 > /proc/sys/vm/drop_caches
    t0=$(date +%s.%N); readall "$d"; t1=$(date +%s.%N); s=$(echo "$t1 - $t0" | bc)
    S[$v]="${S[$v]:-} $s"; printf 'round %d %-6s %6.2f s   (load %s)\n' "$r" "$v" "$s" "$load"
  done
done
umount "$W/mnt" 2> /dev/null || true
med() { printf '%s\n' $1 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ref=native; [ -n "${S[native]:-}" ] || ref=${VARIANTS%% *}; n=$(med "${S[$ref]}")
for v in $VARIANTS; do m=$(med "${S[$v]}"); printf 'median %-6s %6.2f s  %5.2fx %s\n' "$v" "$m" "$(echo "$m / $n" | bc -l)" "$ref"; done
