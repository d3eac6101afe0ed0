#!/usr/bin/env bash
# `make bench-console`: seed N payments (default 5,000,000) with COPY into a
# private durable Postgres (a month of history, a day ahead), then time
# every console page's server side REQUESTS times (default 200). The last
# line is `console seeded=... p99_max_ms=... slowest=...`; the plans of the
# searches are printed above it.
set -euo pipefail
export PAYSCHED_DEV=1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export N=${N:-5000000} REQUESTS=${REQUESTS:-200} ROOT
export PAYSCHED_PG_DURABLE=1
# No statement statistics unless asked (PAYSCHED_PG_STATS=1): they cost.
export PAYSCHED_PG_STATS=${PAYSCHED_PG_STATS:-0}
exec "$ROOT/deploy/local/with-pg.sh" bash -c '
set -euo pipefail
db="${PAYSCHED_TEST_ADMIN_URL%/postgres*}/console?sslmode=disable"
"$ROOT/bin/migrate" --database-url "$db" >/dev/null
"$ROOT/bin/paybench" --mode console --database-url "$db" --n "$N" --requests "$REQUESTS"
'
