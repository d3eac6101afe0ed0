#!/usr/bin/env bash
# `make bench-sync`: what synchronous replication costs an acknowledged
# write. A durable primary (fsync on) and a streaming standby on this host
# (pg.sh); payments-api's creates (paybench, single creates at 64 clients
# and batchCreate) and pgbench's short write transactions, RUNS times
# (default 3) each with the standby asynchronous and synchronous, in
# alternation so that both see the same machine. Prints each run; the
# lines starting "sync" and "async" are the figures.
set -euo pipefail
export PAYSCHED_DEV=1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PG="$ROOT/deploy/local/pg.sh"
RUNS=${RUNS:-3}
"$PG" install
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
dir=$(mktemp -d /tmp/paysched-sync-XXXXXX)
chmod 755 "$dir"
p=$((23000 + RANDOM % 1000)); s=$((p + 1000))
cleanup() {
  "$PG" stop "$dir/standby" || true
  "$PG" stop "$dir/primary" || true
  for d in primary standby; do real=$(cat "$dir/$d/datadir" 2>/dev/null || true); case "$real" in /tmp/*) rm -rf "$real" ;; esac; done
  rm -rf "$dir"
}
trap cleanup EXIT
"$PG" start "$dir/primary" "$p"
"$PG" standby "$dir/standby" "$s" "$p"
url="postgres://postgres@127.0.0.1:$p"
"$bin/psql" -q "$url/postgres" -c "CREATE DATABASE pgbench" >/dev/null
"$bin/pgbench" -q -i -s 10 "$url/pgbench" >/dev/null 2>&1
for run in $(seq 1 "$RUNS"); do
  for mode in async sync; do
    if [ $mode = sync ]; then "$PG" synchronous "$p" on; else "$PG" synchronous "$p" off; fi
    sleep 1
    state=$("$bin/psql" -qAt "$url/postgres" -c "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'paysched_standby'")
    db="$url/bench_${mode}_$run?sslmode=disable"
    "$ROOT/bin/migrate" --database-url "$db" >/dev/null 2>&1
    "$ROOT/bin/payments-api" --database-url "$db" --http-addr 127.0.0.1:18080 --grpc-addr 127.0.0.1:19090 --actor-rate 0 --max-pending 0 2>/dev/null &
    api=$!
    "$ROOT/bin/payctl" --api 127.0.0.1:19090 health --wait 30s >/dev/null
    out=$("$ROOT/bin/paybench" --api-http http://127.0.0.1:18080 --api-grpc 127.0.0.1:19090 --duration 10s | tail -n 1)
    kill -TERM $api; wait $api || true
    pgb=$("$bin/pgbench" -N -c 8 -j 2 -T 10 "$url/pgbench" 2>/dev/null | grep -E "^(latency average|tps)" | tr '\n' ' ')
    echo "$mode (standby $state) run $run: $out | pgbench -N -c 8: $pgb"
    "$bin/psql" -q "$url/postgres" -c "DROP DATABASE bench_${mode}_$run WITH (FORCE)" -c CHECKPOINT >/dev/null
  done
done
