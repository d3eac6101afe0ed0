#!/usr/bin/env bash
# `make bench-webhooks`: N payments' notifications (default 100,000) at RATE a
# second (default 1,000) onto the local broker, through a running
# webhook-dispatcher (a separate process) to 3 tenants of 2 endpoints each:
# one endpoint fails half its attempts with 500, one hangs 20 s. The last
# line is `webhooks delivered= verified= p99_ms= duplicates_per_endpoint=
# lost=`, over the 4 healthy endpoints.
set -euo pipefail
export PAYSCHED_DEV=1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export N=${N:-100000} RATE=${RATE:-1000} ROOT
export PAYSCHED_PG_DURABLE=1
export PAYSCHED_PG_STATS=${PAYSCHED_PG_STATS:-0}
exec "$ROOT/deploy/local/with-pg.sh" bash -c '
set -euo pipefail
db="${PAYSCHED_TEST_ADMIN_URL%/postgres*}/webhooks?sslmode=disable"
"$ROOT/bin/migrate" --database-url "$db" >/dev/null
logs=$(mktemp -d /tmp/paysched-bench-XXXXXX)
pids=()
trap "for p in \${pids[@]+\"\${pids[@]}\"}; do kill -TERM \$p 2>/dev/null || true; done; wait 2>/dev/null || true" EXIT
"$ROOT/bin/kafka" --kafka-port 19092 --kafka-data-dir "$logs/kafka" --http-addr 127.0.0.1:19093 2>"$logs/kafka.log" & pids+=($!)
sleep 1
"$ROOT/bin/webhook-dispatcher" --database-url "$db" --kafka-brokers 127.0.0.1:19092 --http-addr 127.0.0.1:19430 \
  --allow-loopback ${DISPATCHER_FLAGS:-} 2>"$logs/dispatcher.log" & pids+=($!)
"$ROOT/bin/payctl" health --http http://127.0.0.1:19430/healthz --wait 30s >/dev/null
"$ROOT/bin/paybench" --mode webhooks --database-url "$db" --kafka-brokers 127.0.0.1:19092 --n "$N" --rate "$RATE" --timeout 5m || {
  echo "dispatcher log (last lines):" >&2; tail -n 20 "$logs/dispatcher.log" >&2; exit 1; }
'
