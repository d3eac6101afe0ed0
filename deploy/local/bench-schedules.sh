#!/usr/bin/env bash
# `make bench-schedules`: recurring schedules against the engine.
#  1. The 1st-of-the-month spike, paired: SPIKE_PAIRS (default 3) pairs of
#     `make bench` runs of SPIKE_N payments (default 200,000) due in one
#     second, the first of each pair plain payments created through the
#     API, the second occurrences of SPIKE_N monthly schedules made by the
#     planner; the median of the pairs' executed/s ratios (target 0.95).
#  2. The planner: on a private durable Postgres of its own, SCHEDULES
#     (default 1,000,000; 0 skips it) monthly schedules across every zone
#     Go and Postgres both know, all due at 09:00 local on the first of
#     next month, planned by PLANNERS (default 2) planners at once,
#     against the plain runs' median executed/s. The last line:
#     schedules planned= planned_per_s= engine_per_s= duplicates= gaps=
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export GOMAXPROCS=${GOMAXPROCS:-1}
SCHEDULES=${SCHEDULES:-1000000} PLANNERS=${PLANNERS:-2} SPIKE_PAIRS=${SPIKE_PAIRS:-3} SPIKE_N=${SPIKE_N:-200000}
spike_out=$(RUNS=$((2 * SPIKE_PAIRS)) N=$SPIKE_N OCCURRENCES=alternate "$ROOT/deploy/local/bench-engine.sh" | tee >(cat >&2))
rates=($(printf '%s\n' "$spike_out" | sed -n 's/^bench executed_per_s=\([0-9.]*\).*/\1/p'))
if [ "${#rates[@]}" -ne $((2 * SPIKE_PAIRS)) ]; then echo "bench-schedules: ${#rates[@]} spike runs reported, want $((2 * SPIKE_PAIRS))" >&2; exit 1; fi
ratios=() plain=()
for ((i = 0; i < ${#rates[@]}; i += 2)); do
  plain+=("${rates[i]}")
  ratios+=("$(awk -v a="${rates[i]}" -v b="${rates[i + 1]}" 'BEGIN { printf "%.3f", b / a }')")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ratio=$(median "${ratios[@]}")
engine=$(median "${plain[@]}")
echo "schedules spike occurrences_vs_plain=$ratio (median of ${SPIKE_PAIRS} pairs: ${ratios[*]}) plain_executed_per_s=$engine"
[ "$SCHEDULES" = 0 ] && exit 0
export PAYSCHED_PG_DURABLE=1 PAYSCHED_PG_STATS=0 SCHEDULES PLANNERS engine ROOT
exec "$ROOT/deploy/local/with-pg.sh" bash -c '
set -euo pipefail
db="${PAYSCHED_TEST_ADMIN_URL%/postgres*}/schedbench?sslmode=disable"
"$ROOT/bin/migrate" --dev --database-url "$db" >/dev/null
"$ROOT/bin/schedbench" --database-url "$db" --schedules "$SCHEDULES" --planners "$PLANNERS" --engine-per-s "$engine"
'
