#!/usr/bin/env bash
# `make bench-steady`: steady load on the full stack. A private durable
# Postgres, kafka (kfake), cdc, the audit-consumer, payments-api,
# gateway-sim with the demo's faults (5% unavailable, 3% timeout after
# commit, 5-30 ms latency), two executors, one sweeper and the reaper; then
# RATE payments (default 1,000) fall due every second for STEADY_FOR
# (default 120s). The last line:
#   steady rate=... payments=... lateness_p50_s=... lateness_p99_s=...
#          cdc_lag_p99_ms=... notify_p99_ms=... double_charged=...
# A process that exits during the run fails it at once, quoting its log.
set -euo pipefail
# Development mode: the benchmarks run plaintext hops on loopback and the
# published development secrets (docs/PERFORMANCE.md).
export PAYSCHED_DEV=1
# Each service runs on one core, as in Kubernetes, where every pod's CPU
# limit is at most one and the Go runtime sets GOMAXPROCS from it. Here
# the processes share two cores with Postgres; with two each, their
# schedulers spun against each other (the spike ran ~8% slower).
export GOMAXPROCS=${GOMAXPROCS:-1}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export RATE=${RATE:-1000} STEADY_FOR=${STEADY_FOR:-120s} ROOT
export PAYSCHED_PG_DURABLE=1
exec "$ROOT/deploy/local/with-pg.sh" bash -c '
set -euo pipefail
base=${PAYSCHED_TEST_ADMIN_URL%/postgres*}
logs=$(mktemp -d /tmp/paysched-steady-XXXXXX)
pids=()
stop_all() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }
trap stop_all EXIT
db="$base/steady?sslmode=disable"
# The audit log in its own database (AUDIT_APART=0: in the schedule database, as
# before event path v2, for comparison).
adb="$base/steady_audit?sslmode=disable"
[ "${AUDIT_APART:-1}" = 0 ] && adb=$db
"$ROOT/bin/migrate" --database-url "$db" --audit-database-url "$adb" >/dev/null 2>&1
export PAYSCHED_DATABASE_URL="$db"
"$ROOT/bin/kafka" --kafka-port 19092 --kafka-data-dir "$logs/kafka" --http-addr 127.0.0.1:19093 2>"$logs/kafka.log" & kf=$!
"$ROOT/bin/payments-api" --http-addr 127.0.0.1:18080 --grpc-addr 127.0.0.1:19090 --actor-rate 0 --max-pending 0 2>"$logs/api.log" & api=$!
"$ROOT/bin/gateway-sim" --ledger memory --grpc-addr 127.0.0.1:19300 --http-addr 127.0.0.1:19301 \
  --unavailable-rate 0.05 --timeout-after-commit-rate 0.03 --latency-min-ms 5 --latency-max-ms 30 2>"$logs/gw.log" & gw=$!
# Retries within the run (the default schedule waits minutes).
ex=(--gateway-addr 127.0.0.1:19300 --backoff 1s,2s,4s,8s,16s)
"$ROOT/bin/executor" --grpc-addr 127.0.0.1:19100 --http-addr 127.0.0.1:19101 "${ex[@]}" 2>"$logs/ex1.log" & ex1=$!
"$ROOT/bin/executor" --grpc-addr 127.0.0.1:19110 --http-addr 127.0.0.1:19111 "${ex[@]}" 2>"$logs/ex2.log" & ex2=$!
"$ROOT/bin/reaper" --http-addr 127.0.0.1:19210 2>"$logs/reaper.log" & rp=$!
sleep 1
cdcdb=$("$ROOT/deploy/local/pg.sh" socket-url "$PAYSCHED_PG_DIR" "$PAYSCHED_PG_PORT" steady)
"$ROOT/bin/cdc" --database-url "$cdcdb" --kafka-brokers 127.0.0.1:19092 --http-addr 127.0.0.1:19400 2>"$logs/cdc.log" & cd=$!
"$ROOT/bin/audit-consumer" --audit-database-url "$adb" --kafka-brokers 127.0.0.1:19092 --http-addr 127.0.0.1:19410 2>"$logs/audit.log" & au=$!
pids=($kf $api $gw $ex1 $ex2 $rp $cd $au)
"$ROOT/bin/payctl" health --http http://127.0.0.1:19400/healthz --wait 30s >/dev/null
"$ROOT/bin/payctl" --api 127.0.0.1:19090 health --wait 30s >/dev/null
"$ROOT/bin/payctl" --api 127.0.0.1:19100 health --wait 30s >/dev/null
"$ROOT/bin/payctl" --api 127.0.0.1:19110 health --wait 30s >/dev/null
"$ROOT/bin/sweeper" --http-addr 127.0.0.1:19200 --executors 127.0.0.1:19100,127.0.0.1:19110 2>"$logs/sweeper.log" & sw=$!
pids+=($sw)
if [ "${PAYSCHED_PG_STATS:-}" = 1 ]; then psql -q "$db" -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" -c "SELECT pg_stat_statements_reset()" >/dev/null; fi
echo "== steady: $RATE payments due every second for $STEADY_FOR (logs in $logs)"
"$ROOT/bin/paybench" --mode steady --rate "$RATE" --steady-for "$STEADY_FOR" --api-grpc 127.0.0.1:19090 \
  --database-url "$db" --kafka-brokers 127.0.0.1:19092 --gateway-addr 127.0.0.1:19300 --timeout 5m \
  --pids "kafka=$kf,payments-api=$api,gateway-sim=$gw,executor-1=$ex1,executor-2=$ex2,reaper=$rp,cdc=$cd,audit-consumer=$au,sweeper=$sw" \
  --logs "kafka=$logs/kafka.log,payments-api=$logs/api.log,gateway-sim=$logs/gw.log,executor-1=$logs/ex1.log,executor-2=$logs/ex2.log,reaper=$logs/reaper.log,cdc=$logs/cdc.log,audit-consumer=$logs/audit.log,sweeper=$logs/sweeper.log"
if [ "${PAYSCHED_PG_STATS:-}" = 1 ]; then
  psql "$db" -c "SELECT calls, rows, round(total_exec_time::numeric) AS ms, round((total_exec_time/greatest(rows,1))::numeric*1000,1) AS us_per_row, left(regexp_replace(query, chr(10)||chr(124)||chr(32)||chr(43), chr(32), chr(103)), 90) AS q FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 15"
fi
'
