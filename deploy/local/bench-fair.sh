#!/usr/bin/env bash
# `make bench-fair`: fair claims at the due-time spike, engine only. Each
# case runs with the fair sweeper, then with --unfair (due order, the engine
# before), and prints one `fair case=...` line; the plain `make bench` spike
# (one tenant) runs beside them, fair and --unfair, for the throughput
# baseline. The cases (one tenant "big" with N payments, default 200,000,
# in each, all due in the same second):
#   today     100 tenants of 100 (one with weight 2)
#   tenants   10,000 tenants of 1
#   later     today's, beside 1,000,000 PENDING rows due two hours on
#   caps      today's, with 3 sweepers and --tenant-max-inflight 4000
#   latency   today's, with gateway-sim's latency 5-30 ms
# CASES picks some (default all); RUNS rounds of everything (default 1):
# each round runs a case fair and unfair back to back, the order
# alternating (fair first in odd rounds), so a round is a pair sharing the
# machine's drift; the drain ratio printed is the median of the pairs'
# ratios (fair/unfair), the other figures medians of the runs. The last
# line is the today case's, in its old format.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
N=${N:-200000}
RUNS=${RUNS:-1}
CASES=${CASES:-today tenants later caps latency}
tmp=$(mktemp -d /tmp/paysched-bench-fair-XXXXXX)
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" | tail -1; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
# run CASE MODE(fair|unfair) ROUND: one engine run of the case.
run() {
  local c=$1 mode=$2 r=$3 flags="" sweepers=1 gw="" sw=""
  case $c in
    today) flags="--small 100 --per-small 100" ;;
    tenants) flags="--small 10000 --per-small 1" ;;
    later) flags="--small 100 --per-small 100 --later 1000000" ;;
    caps) flags="--small 100 --per-small 100"; sweepers=3; sw="--tenant-max-inflight 4000" ;;
    latency) flags="--small 100 --per-small 100"; gw="--latency-min-ms 5 --latency-max-ms 30" ;;
    *) echo "bench-fair: unknown case $c" >&2; exit 2 ;;
  esac
  [ "$mode" = unfair ] && sw="--unfair $sw"
  echo "== round $r of $RUNS: case $c, $mode"
  RUNS=1 N=$N PAYBENCH_MODE=fair PAYBENCH_FLAGS="$flags" SWEEPERS=$sweepers GATEWAY_FLAGS="$gw" \
    SWEEPER_FLAGS="$sw ${SWEEPER_FLAGS:-}" "$ROOT/deploy/local/bench-engine.sh" | tee "$tmp/$c-$mode-$r"
}
for r in $(seq 1 "$RUNS"); do
  if [ "${BASELINE:-1}" = 1 ]; then # BASELINE=0: the cases only
  echo "== round $r of $RUNS: make bench's spike (one tenant, $N)"
  RUNS=1 N=$N "$ROOT/deploy/local/bench-engine.sh" | tee "$tmp/base-$r"
  echo "== round $r of $RUNS: make bench's spike with --unfair (what fair claims cost one tenant)"
  RUNS=1 N=$N SWEEPER_FLAGS="--unfair ${SWEEPER_FLAGS:-}" "$ROOT/deploy/local/bench-engine.sh" | tee "$tmp/baseunfair-$r"
  fi
  for c in $CASES; do
    if [ $((r % 2)) = 1 ]; then
      run "$c" fair "$r"; run "$c" unfair "$r"
    else
      run "$c" unfair "$r"; run "$c" fair "$r"
    fi
  done
done
med() { for f in "$tmp"/$1-*; do grep "^$2 " "$f" | field "$3"; done | median; }
if [ "${BASELINE:-1}" = 1 ]; then
  base=$(med base bench executed_per_s)
  baseu=$(med baseunfair bench executed_per_s)
  echo "baseline (make bench) executed_per_s=$base"
  echo "make bench --unfair executed_per_s=$baseu (one tenant: fair/unfair=$(awk -v a="$base" -v b="$baseu" 'BEGIN {printf "%.1f%%", 100*a/b}'))"
fi
for c in $CASES; do
  fx=$(med "$c-fair" fairrun executed_per_s)
  fl=$(med "$c-fair" fairrun small_lateness_p99_s)
  fd=$(med "$c-fair" fairrun big_drain_s)
  ff=$(med "$c-fair" fairrun tenant_first_max_s)
  fw=$(med "$c-fair" fairrun weight2_share)
  ud=$(med "$c-unfair" fairrun big_drain_s)
  ul=$(med "$c-unfair" fairrun small_lateness_p99_s)
  # Each round's pair: its fair drain over its unfair drain.
  ratios=$(for r in $(seq 1 "$RUNS"); do
    a=$(grep "^fairrun " "$tmp/$c-fair-$r" | field big_drain_s)
    b=$(grep "^fairrun " "$tmp/$c-unfair-$r" | field big_drain_s)
    awk -v a="$a" -v b="$b" 'BEGIN {if (a != "" && b > 0) printf "%.3f\n", a/b}'
  done)
  echo "fair case=$c pair drain ratios (fair/unfair): $(echo $ratios)"
  echo "fair case=$c executed_per_s=$fx small_lateness_p99_s=$fl big_drain_s=$fd unfair_big_drain_s=$ud drain_ratio=$(echo "$ratios" | median) pairs=$RUNS tenant_first_max_s=$ff weight2_share=$fw unfair_small_lateness_p99_s=$ul"
done
case " $CASES " in
  *" today "*)
    echo "fair executed_per_s=$(med today-fair fairrun executed_per_s) small_lateness_p99_s=$(med today-fair fairrun small_lateness_p99_s) big_drain_s=$(med today-fair fairrun big_drain_s) unfair_big_drain_s=$(med today-unfair fairrun big_drain_s)" ;;
esac
