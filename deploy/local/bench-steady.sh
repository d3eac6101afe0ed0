#!/usr/bin/env bash
# `make bench-steady`: steady load on the full stack. A private durable
# Postgres, kafka (kfake), cdc, the audit-consumer, payments-api,
# gateway-sim with the demo's faults (5% unavailable, 3% timeout after
# commit, 5-30 ms latency), two executors, one sweeper and the reaper; then
# RATE payments (default 1,000) fall due every second for STEADY_FOR
# (default 120s). CDC=0 runs the engine alone (no kafka, cdc or
# audit-consumer), AUDIT=0 everything but the audit-consumer: what each
# part of the event path costs, in the account. The last line:
#   steady rate=... payments=... lateness_p50_s=... lateness_p99_s=...
#          cdc_lag_p99_ms=... notify_p99_ms=... double_charged=...
# PPROF=1 takes a 30 s CPU profile of every Go service 30 s after the
# first due time (go tool pprof -top <binary> <logs>/<service>.pprof).
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
export RATE=${RATE:-1000} STEADY_FOR=${STEADY_FOR:-120s} CDC=${CDC:-1} AUDIT=${AUDIT:-1} ROOT
export PAYSCHED_PG_DURABLE=1
# The audit log on a cluster of its own (the events'), as the local stack
# and production keep it; AUDIT_APART=0 keeps it in the schedule's database.
if [ "${CDC:-1}" = 1 ] && [ "${AUDIT_APART:-1}" != 0 ]; then export PAYSCHED_PG_EVENTS=1; fi
# No statement statistics unless asked (PAYSCHED_PG_STATS=1): they cost.
export PAYSCHED_PG_STATS=${PAYSCHED_PG_STATS:-0}
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
ebase=${PAYSCHED_EVENTS_ADMIN_URL:-$PAYSCHED_TEST_ADMIN_URL}
adb="${ebase%/postgres*}/steady_audit?sslmode=disable"
[ "${AUDIT_APART:-1}" = 0 ] && adb=$db
"$ROOT/bin/migrate" --database-url "$db" --audit-database-url "$adb" >/dev/null 2>&1
export PAYSCHED_DATABASE_URL="$db"
pp() { [ "${PPROF:-}" = 1 ] && echo "--pprof-addr 127.0.0.1:$1"; true; }
"$ROOT/bin/payments-api" --http-addr 127.0.0.1:18080 --grpc-addr 127.0.0.1:19090 --actor-rate 0 --max-pending 0 2>"$logs/api.log" & api=$!
"$ROOT/bin/gateway-sim" --ledger memory --grpc-addr 127.0.0.1:19300 --http-addr 127.0.0.1:19301 \
  --unavailable-rate 0.05 --timeout-after-commit-rate 0.03 --latency-min-ms 5 --latency-max-ms 30 $(pp 16301) ${GATEWAY_FLAGS:-} 2>"$logs/gw.log" & gw=$!
# Retries within the run (the default schedule waits minutes).
ex=(--gateway-addr 127.0.0.1:19300 --backoff 1s,2s,4s,8s,16s ${EXECUTOR_FLAGS:-})
"$ROOT/bin/executor" --grpc-addr 127.0.0.1:19100 --http-addr 127.0.0.1:19101 "${ex[@]}" $(pp 16101) 2>"$logs/ex1.log" & ex1=$!
"$ROOT/bin/executor" --grpc-addr 127.0.0.1:19110 --http-addr 127.0.0.1:19111 "${ex[@]}" $(pp 16111) 2>"$logs/ex2.log" & ex2=$!
"$ROOT/bin/reaper" --http-addr 127.0.0.1:19210 2>"$logs/reaper.log" & rp=$!
pids=($api $gw $ex1 $ex2 $rp)
pidlist="payments-api=$api,gateway-sim=$gw,executor-1=$ex1,executor-2=$ex2,reaper=$rp"
loglist="payments-api=$logs/api.log,gateway-sim=$logs/gw.log,executor-1=$logs/ex1.log,executor-2=$logs/ex2.log,reaper=$logs/reaper.log"
brokers=""
if [ "$CDC" = 1 ]; then
  "$ROOT/bin/kafka" --kafka-port 19092 --kafka-data-dir "$logs/kafka" --http-addr 127.0.0.1:19093 2>"$logs/kafka.log" & kf=$!
  sleep 1
  cdcdb=$("$ROOT/deploy/local/pg.sh" socket-url "$PAYSCHED_PG_DIR" "$PAYSCHED_PG_PORT" steady)
  "$ROOT/bin/cdc" --database-url "$cdcdb" --kafka-brokers 127.0.0.1:19092 --http-addr 127.0.0.1:19400 $(pp 16400) ${CDC_FLAGS:-} 2>"$logs/cdc.log" & cd=$!
  pids+=($kf $cd)
  pidlist="$pidlist,kafka=$kf,cdc=$cd"
  loglist="$loglist,kafka=$logs/kafka.log,cdc=$logs/cdc.log"
  brokers=127.0.0.1:19092
  if [ "$AUDIT" = 1 ]; then
    "$ROOT/bin/audit-consumer" --audit-database-url "$adb" --kafka-brokers 127.0.0.1:19092 --http-addr 127.0.0.1:19410 $(pp 16410) ${AUDIT_FLAGS:-} 2>"$logs/audit.log" & au=$!
    pids+=($au)
    pidlist="$pidlist,audit-consumer=$au"
    loglist="$loglist,audit-consumer=$logs/audit.log"
  fi
  "$ROOT/bin/payctl" health --http http://127.0.0.1:19400/healthz --wait 30s >/dev/null
fi
"$ROOT/bin/payctl" --api 127.0.0.1:19090 health --wait 30s >/dev/null
"$ROOT/bin/payctl" --api 127.0.0.1:19100 health --wait 30s >/dev/null
"$ROOT/bin/payctl" --api 127.0.0.1:19110 health --wait 30s >/dev/null
"$ROOT/bin/sweeper" --http-addr 127.0.0.1:19200 --executors 127.0.0.1:19100,127.0.0.1:19110 $(pp 16200) ${SWEEPER_FLAGS:-} 2>"$logs/sweeper.log" & sw=$!
pids+=($sw)
if [ "${PAYSCHED_PG_STATS:-}" = 1 ]; then psql -q "$db" -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" -c "SELECT pg_stat_statements_reset()" >/dev/null; fi
echo "== steady: $RATE payments due every second for $STEADY_FOR (logs in $logs)"
if [ "${PPROF:-}" = 1 ]; then
  (while ! grep -q "^scheduled" "$logs/out" 2>/dev/null; do sleep 1; done
   t0=$(sed -n "s/.* from \([^ ]*\) for .*/\1/p" "$logs/out"); sleep $(( $(date -d "$t0" +%s) - $(date +%s) + 30 ))
   for s in gateway-sim:16301 executor-1:16101 executor-2:16111 cdc:16400 audit-consumer:16410 sweeper:16200; do
     curl -s -o "$logs/${s%%:*}.pprof" "http://127.0.0.1:${s##*:}/debug/pprof/profile?seconds=30" &
   done; wait; echo "profiles in $logs") &
fi
"$ROOT/bin/paybench" --mode steady --rate "$RATE" --steady-for "$STEADY_FOR" --api-grpc 127.0.0.1:19090 \
  --database-url "$db" --kafka-brokers "$brokers" --gateway-addr 127.0.0.1:19300 --timeout 5m \
  --pids "$pidlist,sweeper=$sw" --logs "$loglist,sweeper=$logs/sweeper.log" | tee "$logs/out"
if [ "${PAYSCHED_PG_STATS:-}" = 1 ]; then
  psql "$db" -c "SELECT calls, rows, round(total_exec_time::numeric) AS ms, round((total_exec_time/greatest(rows,1))::numeric*1000,1) AS us_per_row, left(regexp_replace(query, chr(10)||chr(124)||chr(32)||chr(43), chr(32), chr(103)), 90) AS q FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 15"
fi
'
