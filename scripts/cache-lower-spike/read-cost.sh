#!/bin/bash
# Spike (docs/explanation/host-cache-lower.md), question 5: cold read of every file of a tree
# (`find -type f -print0 | xargs -0 cat > /dev/null` right after `sync; echo 3 > drop_caches`),
#   native   the tree itself (ext4)
#   cache    overlay lowerdir=LAYER::CACHE::EMPTY: placeholders redirecting into CACHE, a flat
#            ext4 directory holding every content under its short name (what the host cache
#            lower would be with everything on disk); EMPTY stands for the content FUSE mount
#   erofs    the same with LAYER packed into an EROFS image (a shared layer image)
#   plain    overlay lowerdir=TREE: plain overlayfs over the tree as a normal lower
# ROUNDS rounds (default 3), the variants alternating in each; prints every pass, the load
# average before it, and the medians.
# Usage: read-cost.sh DIR [ROUNDS]  where DIR holds tree/, layer/, cache/ (make-layer.py)
set -eu
S=$1; R=${2:-3}; W=$S/rc; VARIANTS=${VARIANTS:-native cache erofs plain}
mkdir -p "$W"/{mnt,empty,erofs}
mountpoint -q "$W/erofs" || {
  [ -f "$W/layer.erofs" ] || mkfs.erofs --quiet --chunksize=4096 "$W/layer.erofs" "$S/layer" > /dev/null
  mount -t erofs -o ro,nodev,nosuid "$W/layer.erofs" "$W/erofs"; }
ovl() { rm -rf "$W/u" "$W/w"; mkdir "$W/u" "$W/w"
  mount -t overlay overlay -o "nodev,nosuid,lowerdir=$1,upperdir=$W/u,workdir=$W/w,metacopy=on,redirect_dir=on" "$W/mnt"; }
pass() { # VARIANT -> seconds
  local dir
  case $1 in
    native) dir=$S/tree ;;
    cache) ovl "$S/layer::$S/cache::$W/empty"; dir=$W/mnt ;;
    erofs) ovl "$W/erofs::$S/cache::$W/empty"; dir=$W/mnt ;;
    plain) ovl "$S/tree"; dir=$W/mnt ;;
  esac
  sync; echo 3 > /proc/sys/vm/drop_caches
  local t0 t1; t0=$(date +%s.%N)
  (cd "$dir" && find . -type f -print0 | xargs -0 cat > /dev/null)
  t1=$(date +%s.%N)
  mountpoint -q "$W/mnt" && umount "$W/mnt"
  echo "$t1 - $t0" | bc
}
echo "tree: $(find "$S/tree" -type f | wc -l) files, $(du -s --apparent-size -BM "$S/tree" | cut -f1); cache: $(ls "$S/cache" | wc -l) files, $(du -s -BM "$S/cache" | cut -f1) on disk"
declare -A T
for r in $(seq 1 "$R"); do
  for v in $VARIANTS; do
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    s=$(pass "$v"); T[$v]="${T[$v]:-} $s"
    printf 'round %d %-7s %6.2f s   (load %s)\n' "$r" "$v" "$s" "$load"
  done
done
med() { printf '%s\n' $1 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
n=$(med "${T[native]}")
for v in $VARIANTS; do m=$(med "${T[$v]}"); printf 'median %-7s %6.2f s  %5.2fx native\n' "$v" "$m" "$(echo "$m / $n" | bc -l)"; done
umount "$W/erofs"
