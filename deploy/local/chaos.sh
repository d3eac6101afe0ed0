#!/usr/bin/env bash
# `make chaos`: a private durable Postgres (with-pg.sh; the run restarts it
# once through pg.sh), then bin/chaos drives the full topology under fire
# and checks the invariants. SHORT=1 is the CI variant (2,000 payments over
# 45 s). RESYNC=1 adds a lost replication slot (cdc stopped, its slot
# dropped, cdc back with --resync). Extra flags for bin/chaos go in CHAOS_FLAGS; KEEP=1 keeps the logs
# (a failed run always keeps them, and prints each violation with the rows
# involved).
set -euo pipefail
# Each service runs on one core, as in Kubernetes, where every pod's CPU
# limit is at most one and the Go runtime sets GOMAXPROCS from it. Here
# the processes share two cores with Postgres; with two each, their
# schedulers spun against each other (the spike ran ~8% slower).
export GOMAXPROCS=${GOMAXPROCS:-1}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export ROOT SHORT=${SHORT:-} KEEP=${KEEP:-} CHAOS_FLAGS=${CHAOS_FLAGS:-} RESYNC=${RESYNC:-}
export PAYSCHED_PG_DURABLE=1
# The audit log and the webhooks on a cluster of their own, as in the
# local stack and production.
export PAYSCHED_PG_EVENTS=1
# No statement statistics unless asked (PAYSCHED_PG_STATS=1): they cost.
export PAYSCHED_PG_STATS=${PAYSCHED_PG_STATS:-0}
exec "$ROOT/deploy/local/with-pg.sh" bash -c '
set -euo pipefail
run=$(mktemp -d /tmp/paysched-chaos-XXXXXX)
flags=()
if [ "$SHORT" = 1 ]; then flags=(--payments 2000 --spread 45s --lead 10s --settle 2m); fi
if [ "$RESYNC" = 1 ]; then flags+=(--resync); fi
set +e
"$ROOT/bin/chaos" --bin "$ROOT/bin" --dir "$run" --pg-script "$ROOT/deploy/local/pg.sh" \
  --pg-dir "$PAYSCHED_PG_DIR" --pg-port "$PAYSCHED_PG_PORT" --events-pg-port "$PAYSCHED_EVENTS_PG_PORT" "${flags[@]}" $CHAOS_FLAGS
rc=$?
set -e
if [ $rc -ne 0 ]; then
  echo "--- last log lines of each service ---" >&2
  for f in "$run"/*.log; do echo "== $(basename "$f")" >&2; tail -n 5 "$f" >&2; done
fi
# A failed run keeps its directory (logs, kafka data) for the post-mortem.
if [ "$KEEP" = 1 ] || [ $rc -ne 0 ]; then echo "chaos: logs kept in $run" >&2; else rm -rf "$run"; fi
exit $rc
'
