#!/usr/bin/env bash
# with-pg.sh CMD ARGS...: runs CMD with a private, throwaway Postgres cluster
# (fsync off unless PAYSCHED_PG_DURABLE=1; pg_stat_statements loaded unless
# PAYSCHED_PG_STATS=0) whose superuser URL is in PAYSCHED_TEST_ADMIN_URL, and removes
# the cluster afterwards whatever CMD does. PAYSCHED_PG_DIR and
# PAYSCHED_PG_PORT name it for pg.sh (the chaos run restarts it).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PG="$ROOT/deploy/local/pg.sh"
"$PG" install
dir=$(mktemp -d /tmp/paysched-pg-XXXXXX)
chmod 755 "$dir"
# The port: below the kernel's ephemeral range (an outgoing connection's
# port there makes the bind fail: "could not start server" on a busy
# machine), and reserved the way test/freeport reserves its ports (a lock
# file held while this script runs), so no test takes it meanwhile.
top=$(awk '{print $1 - 1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32767)
mkdir -p /tmp/paysched-ports && chmod 1777 /tmp/paysched-ports 2>/dev/null || true
port=
for p in $(shuf -i "20000-$top" -n 200); do
  exec 9>>"/tmp/paysched-ports/$p" || continue
  if flock -n 9 && ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
  exec 9>&-
done
[ -n "$port" ] || { echo "with-pg: no free port" >&2; exit 1; }
cleanup() {
  "$PG" stop "$dir" || true
  real=$(cat "$dir/datadir" 2>/dev/null || true)
  case "$real" in /tmp/*) rm -rf "$real" ;; esac
  rm -rf "$dir"
}
trap cleanup EXIT
# Tests read pg_stat_statements (an idle sweeper's statements per poll):
# loaded unless the caller says otherwise (the benchmarks do, unless asked).
export PAYSCHED_PG_STATS=${PAYSCHED_PG_STATS-1}
if [ "${PAYSCHED_PG_DURABLE:-}" = 1 ]; then "$PG" start "$dir" "$port"; else PAYSCHED_PG_FAST=1 "$PG" start "$dir" "$port"; fi
# The cluster's postmaster: benchmarks count only its processes' CPU.
PAYSCHED_PG_POSTMASTER=$(head -1 "$("$PG" datadir "$dir")/postmaster.pid" 2>/dev/null || true)
export PAYSCHED_TEST_ADMIN_URL PAYSCHED_PG_DIR="$dir" PAYSCHED_PG_PORT="$port" PAYSCHED_PG_POSTMASTER
PAYSCHED_TEST_ADMIN_URL=$("$PG" url "$port")
echo "with-pg: private postgres on 127.0.0.1:$port" >&2
"$@"
