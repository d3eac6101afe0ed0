#!/usr/bin/env bash
# `make bench-recon`: reconcile one UTC day holding N attempts (default
# 1,000,000) against an in-memory gateway-sim's settlement report, on a
# private durable Postgres. RUNS reconciliations of the seeded day (default
# 3; the first one also repairs the planted dead letters); the last line is
# `bench recon_attempts=... recon_seconds=<median> rows_per_s=...`.
set -euo pipefail
# Development mode: the benchmarks run plaintext hops on loopback and the
# published development secrets (docs/PERFORMANCE.md).
export PAYSCHED_DEV=1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export N=${N:-1000000} RUNS=${RUNS:-3} ROOT
export PAYSCHED_PG_DURABLE=1
# No statement statistics unless asked (PAYSCHED_PG_STATS=1): they cost.
export PAYSCHED_PG_STATS=${PAYSCHED_PG_STATS:-0}
exec "$ROOT/deploy/local/with-pg.sh" bash -c '
set -euo pipefail
db="${PAYSCHED_TEST_ADMIN_URL%/postgres*}/recon?sslmode=disable"
"$ROOT/bin/migrate" --database-url "$db" >/dev/null
"$ROOT/bin/paybench" --mode recon --database-url "$db" --n "$N" --runs "$RUNS"
'
