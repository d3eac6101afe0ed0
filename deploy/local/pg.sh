#!/usr/bin/env bash
# Private PostgreSQL clusters for the local stack and the tests.
#
#   pg.sh install                 install the server package if it is missing
#   pg.sh start DIR PORT          init (once) and start a cluster whose data lives in DIR
#   pg.sh stop DIR                stop it (fast shutdown)
#   pg.sh restart DIR PORT        pg_ctl restart -m fast (the chaos run)
#   pg.sh datadir DIR             print where the cluster in DIR really lives
#   pg.sh url PORT [DB]           print a connection URL
#   pg.sh socket-url DIR PORT [DB] the same over the cluster's Unix socket (cdc
#                                 beside Postgres, see pkg/events/cdc's pacedConn), or
#                                 over TCP when that socket is not there
#   pg.sh standby DIR PORT PRIMARY_PORT
#                                 make (once) and start a streaming standby of the
#                                 cluster on PRIMARY_PORT (pg_basebackup), named
#                                 paysched_standby
#   pg.sh synchronous PRIMARY_PORT [on|off]
#                                 make the primary wait for paysched_standby to flush
#                                 every commit (synchronous_standby_names), or stop
#   pg.sh crash DIR               kill -9 the cluster's postmaster (a failover test)
#   pg.sh promote DIR             promote a standby to primary
#
# PAYSCHED_PG_FAST=1 at first start turns fsync off (throwaway test clusters);
# PAYSCHED_PG_STATS=1 loads pg_stat_statements (profiling).
#
# Postgres refuses to run as root, so as root the cluster runs as the
# `postgres` user. When `postgres` cannot reach DIR (a clone under /root, say),
# the data goes to /tmp/paysched-pg-<hash of DIR> and DIR/datadir points there.
set -euo pipefail

pg_bindir() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -z "$d" ] || [ ! -x "$d/initdb" ]; then return 1; fi
  echo "$d"
}

install_server() {
  if pg_bindir >/dev/null; then return 0; fi
  echo "pg.sh: installing the PostgreSQL server package" >&2
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
  # Debian's package starts its own cluster on 5432; ours are private.
  $sudo systemctl stop postgresql 2>/dev/null || $sudo service postgresql stop 2>/dev/null || true
  pg_bindir >/dev/null
}

as_pg() {
  # cd /: the caller's directory may be closed to postgres.
  if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

# datadir DIR: the real data directory of the cluster kept in DIR.
datadir() {
  local want=$1
  mkdir -p "$want"
  if [ -f "$want/datadir" ]; then cat "$want/datadir"; return; fi
  local real="$want/cluster"
  if [ "$(id -u)" = 0 ] && ! runuser -u postgres -- test -x "$want"; then
    real="/tmp/paysched-pg-$(printf '%s' "$(cd "$want" && pwd -P)" | sha1sum | cut -c1-12)"
  fi
  echo "$real" >"$want/datadir"
  echo "$real"
}

start() {
  local want=$1 port=$2 bin data
  install_server
  bin=$(pg_bindir)
  data=$(datadir "$want")
  if [ ! -f "$data/PG_VERSION" ]; then
    mkdir -p "$data"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$data"
    chmod 700 "$data"
    as_pg "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
    cat >>"$data/postgresql.conf" <<CONF
# paysched private cluster
listen_addresses = '127.0.0.1'
unix_socket_directories = '$data'
wal_level = logical
max_wal_senders = 10
max_replication_slots = 10
max_connections = 300
shared_buffers = 256MB
timezone = 'UTC'
log_timezone = 'UTC'
# A write-heavy schedule: fewer checkpoints, so fewer full-page images in WAL.
max_wal_size = 4GB
checkpoint_timeout = 15min
wal_buffers = 32MB
CONF
    if [ "${PAYSCHED_PG_STATS:-}" = 1 ]; then
      # Statement statistics for profiling (pg_stat_statements).
      echo "shared_preload_libraries = 'pg_stat_statements'" >>"$data/postgresql.conf"
    fi
    if [ "${PAYSCHED_PG_FAST:-}" = 1 ]; then
      # Throwaway test clusters: durability buys nothing there.
      printf 'fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n' >>"$data/postgresql.conf"
    fi
  fi
  # The port may change between runs (tests pick a free one).
  if as_pg "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    echo "pg.sh: cluster in $data already running" >&2
    return 0
  fi
  as_pg "$bin/pg_ctl" -D "$data" -w -t 60 -l "$data/server.log" -o "-p $port -c max_locks_per_transaction=$LOCKS" start >/dev/null
}

stop() {
  local want=$1 bin data
  bin=$(pg_bindir) || return 0
  [ -f "$want/datadir" ] || return 0
  data=$(cat "$want/datadir")
  [ -f "$data/PG_VERSION" ] || return 0
  if as_pg "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    as_pg "$bin/pg_ctl" -D "$data" -w -t 60 -m fast stop >/dev/null
  fi
}

restart() { # fast shutdown (clients disconnected, no waiting), then start again
  local want=$1 port=$2 bin data
  bin=$(pg_bindir)
  data=$(cat "$want/datadir")
  as_pg "$bin/pg_ctl" -D "$data" -w -t 180 -m fast -l "$data/server.log" -o "-p $port -c max_locks_per_transaction=$LOCKS" restart >/dev/null
}

# payments has a partition per day a year ahead, and a statement the planner
# cannot prune at plan time locks every partition and its indexes (~2,000
# locks): the default lock table (64 per connection) overflows with a few
# such statements at once ("out of shared memory", found by the chaos run).
# Set on every start, so clusters made before this line get it too.
LOCKS=1024

socket_url() {
  local sock
  sock=$(datadir "$1")
  if [ -S "$sock/.s.PGSQL.$2" ]; then
    echo "postgres://postgres@/${3:-postgres}?host=$sock&port=$2&sslmode=disable"
  else
    echo "postgres://postgres@127.0.0.1:$2/${3:-postgres}?sslmode=disable"
  fi
}

standby() { # DIR PORT PRIMARY_PORT
  local want=$1 port=$2 primary=$3 bin data
  install_server
  bin=$(pg_bindir)
  data=$(datadir "$want")
  if [ ! -f "$data/PG_VERSION" ]; then
    mkdir -p "$data"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$data"
    chmod 700 "$data"
    # -R writes standby.signal and primary_conninfo; the name is what
    # synchronous_standby_names waits for.
    # (The primary's Unix socket lives in its data directory: the copy
    # skips it, and says so; that warning is noise.)
    as_pg "$bin/pg_basebackup" -h 127.0.0.1 -p "$primary" -U postgres -D "$data" -R -X stream -c fast \
      -d "application_name=paysched_standby" 2> >(grep -v 'skipping special file' >&2)
    # The copy carries the primary's settings; its socket lives with it.
    echo "unix_socket_directories = '$data'" >>"$data/postgresql.conf"
  fi
  if as_pg "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then return 0; fi
  as_pg "$bin/pg_ctl" -D "$data" -w -t 60 -l "$data/server.log" -o "-p $port -c max_locks_per_transaction=$LOCKS" start >/dev/null
}

synchronous() { # PRIMARY_PORT on|off
  local names="ANY 1 (paysched_standby)"
  [ "${2:-on}" = off ] && names=""
  as_pg "$(pg_bindir)/psql" -h 127.0.0.1 -p "$1" -U postgres -d postgres -qAt \
    -c "ALTER SYSTEM SET synchronous_standby_names = '$names'" -c "SELECT pg_reload_conf()" >/dev/null
}

postmaster_pid() { head -n 1 "$(cat "$1/datadir")/postmaster.pid"; }

crash() { kill -9 "$(postmaster_pid "$1")"; }

promote() { as_pg "$(pg_bindir)/pg_ctl" -D "$(cat "$1/datadir")" -w -t 60 promote >/dev/null; }

cmd=${1:-}
case "$cmd" in
  install) install_server ;;
  start) start "$2" "$3" ;;
  stop) stop "$2" ;;
  restart) restart "$2" "$3" ;;
  datadir) datadir "$2" ;;
  url) echo "postgres://postgres@127.0.0.1:$2/${3:-postgres}?sslmode=disable" ;;
  socket-url) socket_url "$2" "$3" "${4:-}" ;;
  standby) standby "$2" "$3" "$4" ;;
  synchronous) synchronous "$2" "${3:-on}" ;;
  crash) crash "$2" ;;
  promote) promote "$2" ;;
  *) echo "usage: pg.sh install|start DIR PORT|stop DIR|restart DIR PORT|datadir DIR|url PORT [DB]|socket-url DIR PORT [DB]|standby DIR PORT PRIMARY_PORT|synchronous PRIMARY_PORT [on|off]|crash DIR|promote DIR" >&2; exit 2 ;;
esac
