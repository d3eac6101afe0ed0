#!/usr/bin/env bash
# `make bench-api`: a private durable Postgres (fsync on), a fresh database,
# payments-api on its own ports, and paybench against it, RUNS times
# (default 3). Prints each run's figures; the last line of each run starts
# with "bench".
set -euo pipefail
# Development mode: the benchmarks run plaintext hops on loopback and the
# published development secrets (docs/PERFORMANCE.md).
export PAYSCHED_DEV=1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${RUNS:-3}
export PAYSCHED_PG_DURABLE=1
# No statement statistics unless asked (PAYSCHED_PG_STATS=1): they cost.
export PAYSCHED_PG_STATS=${PAYSCHED_PG_STATS:-0}
exec "$ROOT/deploy/local/with-pg.sh" bash -c '
set -euo pipefail
ROOT='"$ROOT"'
base=${PAYSCHED_TEST_ADMIN_URL%/postgres*}
for run in $(seq 1 '"$RUNS"'); do
  db="$base/bench_$run?sslmode=disable"
  "$ROOT/bin/migrate" --database-url "$db" >/dev/null 2>&1
  "$ROOT/bin/payments-api" --database-url "$db" --http-addr 127.0.0.1:18080 --grpc-addr 127.0.0.1:19090 --actor-rate 0 --max-pending 0 \
    --db-max-conns "${DB_CONNS:-32}" ${API_FLAGS:-} 2>/tmp/paybench-api.log &
  api=$!
  "$ROOT/bin/payctl" --api 127.0.0.1:19090 health --wait 30s >/dev/null
  echo "== run $run of '"$RUNS"'"
  "$ROOT/bin/paybench" --api-http http://127.0.0.1:18080 --api-grpc 127.0.0.1:19090 ${PAYBENCH_FLAGS:-} || { kill $api; exit 1; }
  kill -TERM $api; wait $api || true
  psql -q "${PAYSCHED_TEST_ADMIN_URL}" -c "DROP DATABASE bench_$run WITH (FORCE)" -c CHECKPOINT
done
'
