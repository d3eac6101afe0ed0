#!/usr/bin/env bash
# `make bench-schedules`: the recurring schedules' planner against the
# engine. First one `make bench` run (N payments due at once) for the
# engine's executed/s; then, on a private durable Postgres of its own,
# SCHEDULES (default 1,000,000) monthly schedules across every zone Go and
# Postgres both know, all due at 09:00 local on the first of next month,
# planned by PLANNERS (default 2) planners at once. The last line:
# schedules planned= planned_per_s= engine_per_s= duplicates= gaps=
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export GOMAXPROCS=${GOMAXPROCS:-1}
SCHEDULES=${SCHEDULES:-1000000} PLANNERS=${PLANNERS:-2}
engine_out=$(RUNS=1 "$ROOT/deploy/local/bench-engine.sh" | tee /dev/stderr)
engine=$(printf '%s\n' "$engine_out" | grep -o 'executed_per_s=[0-9.]*' | tail -1 | cut -d= -f2)
export PAYSCHED_PG_DURABLE=1 PAYSCHED_PG_STATS=0 SCHEDULES PLANNERS engine ROOT
exec "$ROOT/deploy/local/with-pg.sh" bash -c '
set -euo pipefail
db="${PAYSCHED_TEST_ADMIN_URL%/postgres*}/schedbench?sslmode=disable"
"$ROOT/bin/migrate" --dev --database-url "$db" >/dev/null
"$ROOT/bin/schedbench" --database-url "$db" --schedules "$SCHEDULES" --planners "$PLANNERS" --engine-per-s "$engine"
'
