#!/usr/bin/env bash
# `make bench-fair`: fair claims at the due-time spike, engine only. One
# tenant with N payments (default 200,000) and 100 tenants with 100 each,
# all due in the same second, one small tenant with weight 2; run with the
# fair sweeper, then with --unfair (due order, the engine before), and the
# plain `make bench` spike (one tenant) beside them for the throughput
# baseline, fair and --unfair. RUNS rounds of the three (default 1); the last line holds the
# medians.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
N=${N:-200000}
RUNS=${RUNS:-1}
tmp=$(mktemp -d /tmp/paysched-bench-fair-XXXXXX)
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" | tail -1; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
for run in $(seq 1 "$RUNS"); do
  echo "== round $run of $RUNS: make bench's spike (one tenant, $N)"
  RUNS=1 N=$N "$ROOT/deploy/local/bench-engine.sh" | tee "$tmp/base-$run"
  echo "== round $run of $RUNS: make bench's spike with --unfair (what fair claims cost one tenant)"
  RUNS=1 N=$N SWEEPER_FLAGS="--unfair ${SWEEPER_FLAGS:-}" "$ROOT/deploy/local/bench-engine.sh" | tee "$tmp/baseunfair-$run"
  echo "== round $run of $RUNS: fair claims (1 tenant of $N, 100 of 100)"
  RUNS=1 N=$N PAYBENCH_MODE=fair "$ROOT/deploy/local/bench-engine.sh" | tee "$tmp/fair-$run"
  echo "== round $run of $RUNS: due order (--unfair)"
  RUNS=1 N=$N PAYBENCH_MODE=fair SWEEPER_FLAGS="--unfair ${SWEEPER_FLAGS:-}" "$ROOT/deploy/local/bench-engine.sh" | tee "$tmp/unfair-$run"
done
base=$(for f in "$tmp"/base-*; do grep '^bench ' "$f" | field executed_per_s; done | median)
baseu=$(for f in "$tmp"/baseunfair-*; do grep '^bench ' "$f" | field executed_per_s; done | median)
ux=$(for f in "$tmp"/unfair-*; do grep '^fairrun ' "$f" | field executed_per_s; done | median)
fx=$(for f in "$tmp"/fair-*; do grep '^fairrun ' "$f" | field executed_per_s; done | median)
fl=$(for f in "$tmp"/fair-*; do grep '^fairrun ' "$f" | field small_lateness_p99_s; done | median)
fd=$(for f in "$tmp"/fair-*; do grep '^fairrun ' "$f" | field big_drain_s; done | median)
fw=$(for f in "$tmp"/fair-*; do grep '^fairrun ' "$f" | field weight2_share; done | median)
ul=$(for f in "$tmp"/unfair-*; do grep '^fairrun ' "$f" | field small_lateness_p99_s; done | median)
ud=$(for f in "$tmp"/unfair-*; do grep '^fairrun ' "$f" | field big_drain_s; done | median)
echo "baseline (make bench) executed_per_s=$base; fair/baseline=$(awk -v a="$fx" -v b="$base" 'BEGIN {printf "%.1f%%", 100*a/b}')"
echo "make bench --unfair executed_per_s=$baseu (one tenant: fair/unfair=$(awk -v a="$base" -v b="$baseu" 'BEGIN {printf "%.1f%%", 100*a/b}'))"
echo "due order: executed_per_s=$ux small_lateness_p99_s=$ul big_drain_s=$ud"
echo "weight 2 against 1 while both backlogged: share ratio $fw"
echo "fair executed_per_s=$fx small_lateness_p99_s=$fl big_drain_s=$fd unfair_big_drain_s=$ud"
