#!/usr/bin/env bash
# `make bench-compare`: alternated pairs of two benchmark runs, and the
# median of the pairs' ratios (the only figure a "not slower" or a ratio
# target is judged by: a noisy machine drifts between runs, and a pair run
# back to back shares the drift).
#
#   BASE=<rev>       the revision to compare HEAD (this checkout) against,
#                    built in a git worktree of its own (none: HEAD on both
#                    sides, with BASE_BENCH against BENCH)
#   BENCH=bench      the make target and its variables for HEAD's side
#                    ("bench CDC=1", "bench-steady RATE=5000")
#   BASE_BENCH       the same for BASE's side (default: BENCH)
#   PAIRS=5          pairs; the order alternates (base first, then head
#                    first) so neither side always runs on a warmer machine
#   METRIC           the figure of each run's last `key=value` line to
#                    compare (default executed_per_s)
#
# Each run is its bench with RUNS=1; its whole output is kept under a
# directory printed at the end.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PAIRS=${PAIRS:-5}
BENCH=${BENCH:-bench}
BASE_BENCH=${BASE_BENCH:-$BENCH}
METRIC=${METRIC:-executed_per_s}
[ "$PAIRS" -ge 1 ] 2>/dev/null || { echo "PAIRS=$PAIRS: want a whole number of at least 1" >&2; exit 2; }
out=$(mktemp -d /tmp/paysched-compare-XXXXXX)
head_dir=$ROOT
base_dir=$ROOT
if [ -n "${BASE:-}" ]; then
  rev=$(git -C "$ROOT" rev-parse --verify "$BASE^{commit}") || { echo "BASE=$BASE is not a revision of this repository" >&2; exit 2; }
  base_dir=/tmp/paysched-base-${rev:0:12}
  if [ ! -d "$base_dir" ]; then
    git -C "$ROOT" worktree add --detach "$base_dir" "$rev" >/dev/null
  fi
  echo "base: $BASE ($rev) in $base_dir"
  (cd "$base_dir" && make -s build) >"$out/build-base.log" 2>&1 || { echo "building BASE failed; see $out/build-base.log" >&2; exit 1; }
fi
(cd "$head_dir" && make -s build) >"$out/build-head.log" 2>&1 || { echo "building HEAD failed; see $out/build-head.log" >&2; exit 1; }
echo "head: $(git -C "$ROOT" rev-parse --short HEAD)$( [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no)" ] && echo ' (with uncommitted changes)')"
echo "base runs: make $BASE_BENCH; head runs: make $BENCH; $PAIRS pairs; metric $METRIC"

# run SIDE DIR N: one run of SIDE's bench; prints the metric.
run() {
  local side=$1 dir=$2 n=$3 bench log
  if [ "$side" = base ]; then bench=$BASE_BENCH; else bench=$BENCH; fi
  log="$out/$side-$n.log"
  # shellcheck disable=SC2086 # the bench and its variables are words
  (cd "$dir" && make -s $bench RUNS=1) >"$log" 2>&1 || { echo "$side run $n failed; see $log" >&2; return 1; }
  local v
  v=$(grep -o "\b$METRIC=[-0-9.]*" "$log" | tail -1 | cut -d= -f2)
  [ -n "$v" ] || { echo "$side run $n printed no $METRIC=; see $log" >&2; return 1; }
  echo "$v"
}

ratios=()
for i in $(seq 1 "$PAIRS"); do
  if [ $((i % 2)) = 1 ]; then
    b=$(run base "$base_dir" "$i"); h=$(run head "$head_dir" "$i"); order="base first"
  else
    h=$(run head "$head_dir" "$i"); b=$(run base "$base_dir" "$i"); order="head first"
  fi
  r=$(awk -v h="$h" -v b="$b" 'BEGIN { if (b == 0) print "inf"; else printf "%.3f", h / b }')
  ratios+=("$r")
  echo "pair $i ($order): base $METRIC=$b head $METRIC=$h ratio $r"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else printf "%.3f", (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
lo=$(printf '%s\n' "${ratios[@]}" | sort -g | head -1)
hi=$(printf '%s\n' "${ratios[@]}" | sort -g | tail -1)
echo "logs in $out"
echo "compare metric=$METRIC pairs=$PAIRS median_ratio=$median min_ratio=$lo max_ratio=$hi (head/base; base: ${BASE:-HEAD} make $BASE_BENCH; head: make $BENCH)"
