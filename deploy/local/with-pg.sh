#!/usr/bin/env bash
# with-pg.sh CMD ARGS...: runs CMD with a private, throwaway Postgres cluster
# (fsync off unless PAYSCHED_PG_DURABLE=1; pg_stat_statements loaded unless
# PAYSCHED_PG_STATS=0) whose superuser URL is in PAYSCHED_TEST_ADMIN_URL, and removes
# the cluster afterwards whatever CMD does. PAYSCHED_PG_DIR and
# PAYSCHED_PG_PORT name it for pg.sh (the chaos run restarts it).
# PAYSCHED_PG_EVENTS=1 starts a second cluster beside it, the events' (the
# audit log and the webhooks, as the local stack and production keep them:
# docs/DESIGN.md, "Where the audit log lives"), named by
# PAYSCHED_EVENTS_PG_DIR, PAYSCHED_EVENTS_PG_PORT and
# PAYSCHED_EVENTS_ADMIN_URL. PAYSCHED_PG_POSTMASTER lists the clusters'
# postmasters (the benchmarks count their processes' CPU).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PG="$ROOT/deploy/local/pg.sh"
"$PG" install
# A port below the kernel's ephemeral range (an outgoing connection's port
# there makes the bind fail: "could not start server" on a busy machine),
# and reserved the way test/freeport reserves its ports (a lock file held,
# on descriptor $1, while this script runs), so no test takes it meanwhile.
top=$(awk '{print $1 - 1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32767)
mkdir -p /tmp/paysched-ports && chmod 1777 /tmp/paysched-ports 2>/dev/null || true
pick_port() { # pick_port FD: prints a reserved port
  local fd=$1 p
  for p in $(shuf -i "20000-$top" -n 200); do
    eval "exec $fd>>\"/tmp/paysched-ports/$p\"" || continue
    if flock -n "$fd" && ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
    eval "exec $fd>&-"
  done
  echo "with-pg: no free port" >&2
  return 1
}
dirs=()
cleanup() {
  local d real
  for d in ${dirs[@]+"${dirs[@]}"}; do
    "$PG" stop "$d" || true
    real=$(cat "$d/datadir" 2>/dev/null || true)
    case "$real" in /tmp/*) rm -rf "$real" ;; esac
    rm -rf "$d"
  done
}
trap cleanup EXIT
# Tests read pg_stat_statements (an idle sweeper's statements per poll):
# loaded unless the caller says otherwise (the benchmarks do, unless asked).
export PAYSCHED_PG_STATS=${PAYSCHED_PG_STATS-1}
start_cluster() { # start_cluster DIR PORT
  if [ "${PAYSCHED_PG_DURABLE:-}" = 1 ]; then "$PG" start "$1" "$2"; else PAYSCHED_PG_FAST=1 "$PG" start "$1" "$2"; fi
  head -1 "$("$PG" datadir "$1")/postmaster.pid" 2>/dev/null || true
}
dir=$(mktemp -d /tmp/paysched-pg-XXXXXX)
chmod 755 "$dir"
dirs+=("$dir")
port=$(pick_port 9)
# The cluster's postmaster: benchmarks count only its processes' CPU.
PAYSCHED_PG_POSTMASTER=$(start_cluster "$dir" "$port")
export PAYSCHED_TEST_ADMIN_URL PAYSCHED_PG_DIR="$dir" PAYSCHED_PG_PORT="$port" PAYSCHED_PG_POSTMASTER
PAYSCHED_TEST_ADMIN_URL=$("$PG" url "$port")
echo "with-pg: private postgres on 127.0.0.1:$port" >&2
if [ "${PAYSCHED_PG_EVENTS:-}" = 1 ]; then
  edir=$(mktemp -d /tmp/paysched-pg-XXXXXX)
  chmod 755 "$edir"
  dirs+=("$edir")
  eport=$(pick_port 8)
  PAYSCHED_PG_POSTMASTER="$PAYSCHED_PG_POSTMASTER,$(start_cluster "$edir" "$eport")"
  export PAYSCHED_EVENTS_PG_DIR="$edir" PAYSCHED_EVENTS_PG_PORT="$eport" PAYSCHED_EVENTS_ADMIN_URL
  PAYSCHED_EVENTS_ADMIN_URL=$("$PG" url "$eport")
  echo "with-pg: the events' postgres on 127.0.0.1:$eport" >&2
fi
"$@"
