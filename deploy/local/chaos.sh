#!/usr/bin/env bash
# `make chaos`: a private durable Postgres (restartable: the run restarts
# it once), then bin/chaos drives the full topology under fire and checks
# the invariants. SHORT=1 is the CI variant (2,000 payments over 45 s).
# Extra flags for bin/chaos go in CHAOS_FLAGS.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PG="$ROOT/deploy/local/pg.sh"
"$PG" install
work=$(mktemp -d /tmp/paysched-chaos-XXXXXX)
chmod 755 "$work"
port=$(for p in $(shuf -i 20000-60000 -n 50); do
  (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; break; }; done)
cleanup() {
  "$PG" stop "$work/pg" || true
  real=$(cat "$work/pg/datadir" 2>/dev/null || true)
  case "$real" in /tmp/*) rm -rf "$real" ;; esac
  if [ "${KEEP:-}" != 1 ]; then rm -rf "$work"; else echo "chaos: logs kept in $work" >&2; fi
}
trap cleanup EXIT
mkdir -p "$work/pg"
"$PG" start "$work/pg" "$port"
flags=()
if [ "${SHORT:-}" = 1 ]; then
  flags=(--payments 2000 --spread 45s --lead 10s --settle 2m)
fi
set +e
"$ROOT/bin/chaos" --bin "$ROOT/bin" --dir "$work/run" --pg-script "$PG" --pg-dir "$work/pg" --pg-port "$port" \
  "${flags[@]}" ${CHAOS_FLAGS:-}
rc=$?
set -e
if [ $rc -ne 0 ] && [ "${KEEP:-}" != 1 ]; then
  echo "--- last log lines of each service ---" >&2
  for f in "$work"/run/*.log; do echo "== $(basename "$f")" >&2; tail -n 5 "$f" >&2; done
fi
exit $rc
