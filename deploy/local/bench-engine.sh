#!/usr/bin/env bash
# `make bench`: the due-time spike. A private durable Postgres, then the
# engine part of `make up` on bench ports — payments-api, gateway-sim (memory
# ledger, zero latency), two executors, one sweeper, the reaper — and N
# payments (default 200,000) all due in the same second. RUNS times
# (default 3); each run ends with a `bench ...` line. CDC=1 adds kafka (kfake),
# cdc and the audit-consumer, and reports CDC lag and audit catch-up;
# AUDIT_AFTER=1 with it starts the audit-consumer only once the spike is
# executed (what capture alone costs the engine, and the audit log's catch-up
# from a whole backlog). LEAD sets the due time's distance (default:
# measured from this machine's create rate, so a slow machine waits longer
# instead of failing). AUDIT_APART=0 keeps the audit log in the schedule's
# database, as before event path v2.
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
export N=${N:-200000} RUNS=${RUNS:-3} CDC=${CDC:-} LEAD=${LEAD:-} OCCURRENCES=${OCCURRENCES:-} ROOT
export PAYSCHED_PG_DURABLE=1
# The audit log on a cluster of its own (the events'), as the local stack
# and production keep it; AUDIT_APART=0 keeps it in the schedule's database.
if [ "${CDC:-}" = 1 ] && [ "${AUDIT_APART:-1}" != 0 ]; then export PAYSCHED_PG_EVENTS=1; fi
# No statement statistics unless asked (PAYSCHED_PG_STATS=1): they cost.
export PAYSCHED_PG_STATS=${PAYSCHED_PG_STATS:-0}
exec "$ROOT/deploy/local/with-pg.sh" bash -c '
set -euo pipefail
base=${PAYSCHED_TEST_ADMIN_URL%/postgres*}
logs=$(mktemp -d /tmp/paysched-bench-XXXXXX)
pids=()
stop_all() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }
trap stop_all EXIT
for run in $(seq 1 "$RUNS"); do
  db="$base/spike_$run?sslmode=disable"
  # The audit log in its own database (AUDIT_APART=0: in the schedule database,
  # as before event path v2, for comparison).
  ebase=${PAYSCHED_EVENTS_ADMIN_URL:-$PAYSCHED_TEST_ADMIN_URL}
  adb="${ebase%/postgres*}/spike_${run}_audit?sslmode=disable"
  [ "${AUDIT_APART:-1}" = 0 ] && adb=$db
  "$ROOT/bin/migrate" --database-url "$db" --audit-database-url "$adb" >/dev/null 2>&1
  export PAYSCHED_DATABASE_URL="$db"
  # The benchmarks are one actor at full speed: no per-actor limits.
  "$ROOT/bin/payments-api" --http-addr 127.0.0.1:18080 --grpc-addr 127.0.0.1:19090 --actor-rate 0 --max-pending 0 2>"$logs/api.log" & api=$!
  "$ROOT/bin/gateway-sim" --ledger memory --grpc-addr 127.0.0.1:19300 --http-addr 127.0.0.1:19301 ${GATEWAY_FLAGS:-} 2>"$logs/gw.log" & gw=$!
  "$ROOT/bin/executor" --grpc-addr 127.0.0.1:19100 --http-addr 127.0.0.1:19101 --gateway-addr 127.0.0.1:19300 ${EXECUTOR_FLAGS:-} 2>"$logs/ex1.log" & ex1=$!
  "$ROOT/bin/executor" --grpc-addr 127.0.0.1:19110 --http-addr 127.0.0.1:19111 --gateway-addr 127.0.0.1:19300 ${EXECUTOR_FLAGS:-} 2>"$logs/ex2.log" & ex2=$!
  "$ROOT/bin/reaper" --http-addr 127.0.0.1:19210 2>"$logs/reaper.log" & rp=$!
  pids=($api $gw $ex1 $ex2 $rp)
  cdcflags=""
  pidlist="payments-api=$api,gateway-sim=$gw,executor-1=$ex1,executor-2=$ex2,reaper=$rp"
  loglist="payments-api=$logs/api.log,gateway-sim=$logs/gw.log,executor-1=$logs/ex1.log,executor-2=$logs/ex2.log,reaper=$logs/reaper.log,sweeper=$logs/sweeper.log"
  if [ "$CDC" = 1 ]; then
    "$ROOT/bin/kafka" --kafka-port 19092 --kafka-data-dir "$logs/kafka-$run" --http-addr 127.0.0.1:19093 2>"$logs/kafka.log" & kf=$!
    sleep 1
    # cdc beside Postgres streams over its Unix socket (as in `make up`);
    # CDC_TCP=1 over loopback TCP instead.
    cdcdb=$db
    [ "${CDC_TCP:-}" = 1 ] || cdcdb=$("$ROOT/deploy/local/pg.sh" socket-url "$PAYSCHED_PG_DIR" "$PAYSCHED_PG_PORT" "spike_$run")
    "$ROOT/bin/cdc" --database-url "$cdcdb" --kafka-brokers 127.0.0.1:19092 --http-addr 127.0.0.1:19400 ${CDC_FLAGS:-} 2>"$logs/cdc.log" & cd=$!
    audit=("$ROOT/bin/audit-consumer" --audit-database-url "$adb" --kafka-brokers 127.0.0.1:19092 --http-addr 127.0.0.1:19410 ${AUDIT_FLAGS:-})
    if [ "${AUDIT_AFTER:-}" = 1 ]; then
      # Diagnosis: the capture path alone during the spike, the audit log
      # written from its backlog once every payment is executed.
      (while [ ! -e "$logs/drained-$run" ]; do sleep 0.5; done; exec "${audit[@]}") 2>"$logs/audit.log" & au=$!
    else
      "${audit[@]}" 2>"$logs/audit.log" & au=$!
    fi
    pids+=($kf $cd $au)
    cdcflags="--kafka-brokers 127.0.0.1:19092 --audit-database-url $adb"
    pidlist="$pidlist,kafka=$kf,cdc=$cd,audit-consumer=$au"
    loglist="$loglist,kafka=$logs/kafka.log,cdc=$logs/cdc.log,audit-consumer=$logs/audit.log"
    # cdc serves HTTP once its slot exists for good (a slot still being
    # created is listed in pg_replication_slots but may yet vanish).
    "$ROOT/bin/payctl" health --http http://127.0.0.1:19400/healthz --wait 30s >/dev/null
  fi
  "$ROOT/bin/payctl" --api 127.0.0.1:19090 health --wait 30s >/dev/null
  "$ROOT/bin/payctl" --api 127.0.0.1:19100 health --wait 30s >/dev/null
  "$ROOT/bin/payctl" --api 127.0.0.1:19110 health --wait 30s >/dev/null
  # Claims of 1,000 (the default is 500) halve the per-statement overhead at the spike.
  "$ROOT/bin/sweeper" --http-addr 127.0.0.1:19200 --executors 127.0.0.1:19100,127.0.0.1:19110 --batch 1000 ${SWEEPER_FLAGS:-} 2>"$logs/sweeper.log" & sw=$!
  pids+=($sw)
  # SWEEPERS=n runs n sweepers side by side (the caps case of bench-fair).
  for k in $(seq 2 "${SWEEPERS:-1}"); do
    "$ROOT/bin/sweeper" --id "sweeper-$k" --http-addr "127.0.0.1:$((19200 + 10 * k))" --executors 127.0.0.1:19100,127.0.0.1:19110 --batch 1000 ${SWEEPER_FLAGS:-} 2>"$logs/sweeper-$k.log" &
    pids+=($!)
    pidlist="$pidlist,sweeper-$k=$!"
  done
  if [ "${PAYSCHED_PG_STATS:-}" = 1 ]; then psql -q "$db" -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" -c "SELECT pg_stat_statements_reset()" >/dev/null; fi
  # OCCURRENCES=alternate: the payments of the even runs are occurrences of
  # recurring schedules, made by the planner (make bench-schedules pairs
  # them with the odd runs, plain payments).
  occ=""
  if [ "${OCCURRENCES:-}" = alternate ] && [ $((run % 2)) = 0 ]; then occ="--occurrences"; fi
  echo "== run $run of $RUNS: $N ${occ:+occurrence }payments due in one second"
  "$ROOT/bin/paybench" --mode "${PAYBENCH_MODE:-spike}" --n "$N" ${LEAD:+--lead "$LEAD"} ${PAYBENCH_FLAGS:-} $occ --api-grpc 127.0.0.1:19090 --database-url "$db" $cdcflags \
    --pids "$pidlist,sweeper=$sw" --logs "$loglist" | while IFS= read -r line; do
      echo "$line"
      case $line in *" open=0") touch "$logs/drained-$run" ;; esac
      case $line in "wal per payment"*) echo "$line" >"$logs/wal-$run" ;; esac
    done
  if [ "${PAYSCHED_WAL_STATS:-}" = 1 ]; then
    # What the WAL of the spike is made of, by record type (the walsender
    # reads every record of the cluster, whichever database wrote it).
    range=$(sed -n "s/.*from \([0-9A-F\/]*\) to \([0-9A-F\/]*\)).*/-s \1 -e \2/p" "$logs/wal-$run")
    pgdata=$("$ROOT/deploy/local/pg.sh" datadir "$PAYSCHED_PG_DIR")
    bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
    if [ "$(id -u)" = 0 ]; then runas=(runuser -u postgres --); else runas=(); fi
    (cd / && "${runas[@]}" "$bin/pg_waldump" --stats=record -p "$pgdata/pg_wal" $range 2>&1 | head -40) || true
  fi
  if [ "${PAYSCHED_PG_STATS:-}" = 1 ]; then
    psql "$db" -c "SELECT calls, rows, round(total_exec_time::numeric) AS ms, round((total_exec_time/greatest(rows,1))::numeric*1000,1) AS us_per_row, left(regexp_replace(query, chr(10)||chr(124)||chr(32)||chr(43), chr(32), chr(103)), 90) AS q FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 12"
  fi
  stop_all
  # A clean start for the next run: no autovacuum of the tables of this one
  # competing with it.
  psql -q "${PAYSCHED_TEST_ADMIN_URL}" -c "DROP DATABASE spike_$run WITH (FORCE)" -c "DROP DATABASE IF EXISTS spike_${run}_audit WITH (FORCE)" -c CHECKPOINT
  [ -z "${PAYSCHED_EVENTS_ADMIN_URL:-}" ] || psql -q "$PAYSCHED_EVENTS_ADMIN_URL" -c "DROP DATABASE IF EXISTS spike_${run}_audit WITH (FORCE)" -c CHECKPOINT
done
'
