#!/usr/bin/env bash
# `make bench-webhooks`: N payments (default 100,000) scheduled at RATE a
# second (default 1,000) through payments-api, each due 2 s after its
# creation, executed by the engine (gateway-sim without faults, two
# executors, one sweeper), their notifications made by cdc and the
# audit-consumer (created and completed: two a payment) and delivered by a
# running webhook-dispatcher (a separate process) to 3 tenants of 2
# endpoints each: one endpoint fails half its attempts with 500, one hangs
# 20 s. SOURCE=notifications produces the N notifications onto the topic
# directly instead (the dispatcher alone, no engine, the same two a
# payment). The last line is `webhooks delivered= verified= p99_ms=
# duplicates_per_endpoint= lost= dispatcher_us= product_us= ...` over the 4
# healthy endpoints; before it, the CPU account per delivery.
set -euo pipefail
export PAYSCHED_DEV=1
# One core per service, as in Kubernetes (see bench-engine.sh).
export GOMAXPROCS=${GOMAXPROCS:-1}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export N=${N:-100000} RATE=${RATE:-1000} SOURCE=${SOURCE:-payments} ROOT
export PAYSCHED_PG_DURABLE=1
export PAYSCHED_PG_STATS=${PAYSCHED_PG_STATS:-0}
# The audit log and the webhooks on the events' cluster, as in the local
# stack and production.
export PAYSCHED_PG_EVENTS=1
exec "$ROOT/deploy/local/with-pg.sh" bash -c '
set -euo pipefail
base=${PAYSCHED_TEST_ADMIN_URL%/postgres*}
db="$base/webhooks?sslmode=disable"
ebase=${PAYSCHED_EVENTS_ADMIN_URL%/postgres*}
adb="$ebase/webhooks_audit?sslmode=disable"
hdb="$ebase/webhooks_hooks?sslmode=disable"
"$ROOT/bin/migrate" --database-url "$db" --audit-database-url "$adb" --webhooks-database-url "$hdb" >/dev/null 2>&1
export PAYSCHED_DATABASE_URL="$db"
logs=$(mktemp -d /tmp/paysched-bench-XXXXXX)
pids=()
trap "for p in \${pids[@]+\"\${pids[@]}\"}; do kill -TERM \$p 2>/dev/null || true; done; wait 2>/dev/null || true" EXIT
"$ROOT/bin/kafka" --kafka-port 19092 --kafka-data-dir "$logs/kafka" --http-addr 127.0.0.1:19093 2>"$logs/kafka.log" & pids+=($!)
pidlist="kafka=$!"
sleep 1
executed=""
if [ "$SOURCE" = payments ]; then
  executed=--executed
  "$ROOT/bin/payments-api" --http-addr 127.0.0.1:18080 --grpc-addr 127.0.0.1:19090 --actor-rate 0 --max-pending 0 2>"$logs/api.log" & pids+=($!)
  pidlist="$pidlist,payments-api=$!"
  "$ROOT/bin/gateway-sim" --ledger memory --grpc-addr 127.0.0.1:19300 --http-addr 127.0.0.1:19301 2>"$logs/gw.log" & pids+=($!)
  pidlist="$pidlist,gateway-sim=$!"
  "$ROOT/bin/executor" --grpc-addr 127.0.0.1:19100 --http-addr 127.0.0.1:19101 --gateway-addr 127.0.0.1:19300 2>"$logs/ex1.log" & pids+=($!)
  pidlist="$pidlist,executor-1=$!"
  "$ROOT/bin/executor" --grpc-addr 127.0.0.1:19110 --http-addr 127.0.0.1:19111 --gateway-addr 127.0.0.1:19300 2>"$logs/ex2.log" & pids+=($!)
  pidlist="$pidlist,executor-2=$!"
  cdcdb=$("$ROOT/deploy/local/pg.sh" socket-url "$PAYSCHED_PG_DIR" "$PAYSCHED_PG_PORT" webhooks)
  "$ROOT/bin/cdc" --database-url "$cdcdb" --kafka-brokers 127.0.0.1:19092 --http-addr 127.0.0.1:19400 2>"$logs/cdc.log" & pids+=($!)
  pidlist="$pidlist,cdc=$!"
  "$ROOT/bin/audit-consumer" --audit-database-url "$adb" --kafka-brokers 127.0.0.1:19092 --http-addr 127.0.0.1:19410 2>"$logs/audit.log" & pids+=($!)
  pidlist="$pidlist,audit-consumer=$!"
  "$ROOT/bin/payctl" health --http http://127.0.0.1:19400/healthz --wait 30s >/dev/null
  for a in 127.0.0.1:19090 127.0.0.1:19100 127.0.0.1:19110; do "$ROOT/bin/payctl" --api $a health --wait 30s >/dev/null; done
  "$ROOT/bin/sweeper" --http-addr 127.0.0.1:19200 --executors 127.0.0.1:19100,127.0.0.1:19110 2>"$logs/sweeper.log" & pids+=($!)
  pidlist="$pidlist,sweeper=$!"
fi
"$ROOT/bin/webhook-dispatcher" --webhooks-database-url "$hdb" --kafka-brokers 127.0.0.1:19092 --http-addr 127.0.0.1:19430 \
  --allow-loopback ${DISPATCHER_FLAGS:-} 2>"$logs/dispatcher.log" & pids+=($!)
pidlist="$pidlist,webhook-dispatcher=$!"
"$ROOT/bin/payctl" health --http http://127.0.0.1:19430/healthz --wait 30s >/dev/null
if [ "${PAYSCHED_PG_STATS:-}" = 1 ]; then psql -q "$hdb" -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" -c "SELECT pg_stat_statements_reset()" >/dev/null; fi
echo "== webhooks: $N payments ($SOURCE) at $RATE/s (logs in $logs)"
"$ROOT/bin/paybench" --mode webhooks $executed --api-grpc 127.0.0.1:19090 --database-url "$db" --webhooks-database-url "$hdb" \
  --kafka-brokers 127.0.0.1:19092 --pids "$pidlist" \
  --n "$N" --rate "$RATE" --timeout 5m || {
  echo "dispatcher log (last lines):" >&2; tail -n 20 "$logs/dispatcher.log" >&2; exit 1; }
if [ "${PAYSCHED_PG_STATS:-}" = 1 ]; then
  psql "$hdb" -c "SELECT calls, rows, round(total_exec_time::numeric) AS ms, round((total_exec_time/greatest(rows,1))::numeric*1000,1) AS us_per_row, left(regexp_replace(query, chr(10)||chr(124)||chr(32)||chr(43), chr(32), chr(103)), 90) AS q FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) ORDER BY total_exec_time DESC LIMIT 12"
fi
'
