#!/usr/bin/env bash
# The local stack: a private Postgres under .data/, migrations, and the
# services, each started in the background with a pid file and a log.
#
#   stack.sh up      start what is not running (idempotent), wait until healthy
#   stack.sh down    stop exactly what `up` started, by pid, then Postgres
#   stack.sh logs    show the logs (FOLLOW=1 to follow)
#   stack.sh status  show what runs
#
# GATEWAY=stripe (default grpc) points the executors, the reconciler and
# payments-api at stripe-mock (.tools/stripe-mock, from deploy/local/tools.sh)
# through the Stripe adapter; gateway-sim still runs for the demo and payctl.
set -euo pipefail
# Each service runs on one core, as in Kubernetes, where every pod's CPU
# limit is at most one and the Go runtime sets GOMAXPROCS from it. Here
# the processes share two cores with Postgres; with two each, their
# schedulers spun against each other (the spike ran ~8% slower).
export GOMAXPROCS=${GOMAXPROCS:-1}
# Development mode (--dev): the local database and Kafka are plaintext on
# loopback. The secrets are still this checkout's own (generated below, in
# .data/secrets), and the gRPC hops are still mutual TLS.
export PAYSCHED_DEV=1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DATA="$ROOT/.data"
RUN="$DATA/run"
LOGS="$DATA/logs"
PGPORT=${PAYSCHED_PG_PORT:-55432}
# The events' cluster: the audit log and the webhooks, apart from the
# schedule's cluster, whose CDC walsender reads every WAL record of its own
# cluster (docs/DESIGN.md, "Where the audit log lives").
EVENTS_PGPORT=${PAYSCHED_EVENTS_PG_PORT:-55433}
HTTP_ADDR=${PAYSCHED_HTTP_ADDR:-127.0.0.1:8080}
GRPC_ADDR=${PAYSCHED_GRPC_ADDR:-127.0.0.1:9090}
ADMIN_HTTP_ADDR=${PAYSCHED_ADMIN_HTTP_ADDR:-127.0.0.1:8081}
ADMIN_GRPC_ADDR=${PAYSCHED_ADMIN_GRPC_ADDR:-127.0.0.1:9091}
KAFKA_PORT=${PAYSCHED_KAFKA_PORT:-9092}
DB_URL="postgres://postgres@127.0.0.1:$PGPORT/paysched?sslmode=disable"
# The audit log's own database (docs/DESIGN.md, "Where the audit log lives").
AUDIT_DB_URL="postgres://postgres@127.0.0.1:$EVENTS_PGPORT/paysched_audit?sslmode=disable"
# The webhooks' own database (docs/DESIGN.md, "Where the webhooks live").
HOOKS_DB_URL="postgres://postgres@127.0.0.1:$EVENTS_PGPORT/paysched_webhooks?sslmode=disable"
PG="$ROOT/deploy/local/pg.sh"
GATEWAY=${GATEWAY:-grpc}
MAX_REQUEST=${PAYSCHED_LOCAL_MAX_REQUEST:-5s}
# Local retries are quick (production default: 1m,5m,30m,2h,12h) so that a
# retried payment settles while you watch.
BACKOFF=${PAYSCHED_LOCAL_BACKOFF:-2s,4s,8s,16s,32s}
STRIPE_MOCK_HTTP=127.0.0.1:12111
STRIPE_MOCK_HTTPS=127.0.0.1:12112

alive() { # alive NAME: the pid file names a live process running bin/<binary of NAME> (stripe-mock: .tools/stripe-mock)
  local f="$RUN/$1.pid" pid bin="bin/${1%-[0-9]*}"
  [ "$1" = stripe-mock ] && bin=".tools/stripe-mock"
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  running "$pid" && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$bin"
}

running() { # running PID: exists and is not a zombie waiting to be reaped
  [ -r "/proc/$1/stat" ] && ! awk '{exit ($3 == "Z") ? 0 : 1}' "/proc/$1/stat" 2>/dev/null
}

start_service() { # start_service NAME[-N] ARGS...: runs bin/NAME, logs to NAME[-N].log
  local name=$1; shift
  if alive "$name"; then echo "  $name already running (pid $(cat "$RUN/$name.pid"))"; return; fi
  PAYSCHED_DATABASE_URL="$DB_URL" nohup "$ROOT/bin/${name%-[0-9]*}" "$@" >>"$LOGS/$name.log" 2>&1 &
  echo $! >"$RUN/$name.pid"
  echo "  started $name (pid $!)"
}

secret() { # secret NAME: .data/secrets/NAME, 32 random bytes made once for this checkout
  local f="$DATA/secrets/$1"
  if [ ! -s "$f" ]; then
    mkdir -p "$DATA/secrets"; chmod 700 "$DATA/secrets"
    (umask 077; head -c 32 /dev/urandom | base64 >"$f")
  fi
  echo "$f"
}

start_stripe_mock() { # stripe-mock on the ports the Stripe adapter is given, and a test key for it
  local bin="$ROOT/.tools/stripe-mock"
  [ -x "$bin" ] || { echo ".tools/stripe-mock is missing: run deploy/local/tools.sh" >&2; exit 1; }
  (umask 077; echo sk_test_123 >"$DATA/stripe-key")
  chmod 600 "$DATA/stripe-key"
  if alive stripe-mock; then echo "  stripe-mock already running (pid $(cat "$RUN/stripe-mock.pid"))"; return; fi
  nohup "$bin" -http-addr "$STRIPE_MOCK_HTTP" -https-addr "$STRIPE_MOCK_HTTPS" >>"$LOGS/stripe-mock.log" 2>&1 &
  echo $! >"$RUN/stripe-mock.pid"
  echo "  started stripe-mock (pid $!)"
  local i
  for i in $(seq 40); do
    curl -sf -o /dev/null -H 'Authorization: Bearer sk_test_123' "http://$STRIPE_MOCK_HTTP/v1/balance" && return
    sleep 0.25
  done
  echo "stripe-mock did not answer on $STRIPE_MOCK_HTTP; see .data/logs/stripe-mock.log" >&2; exit 1
}

up() {
  mkdir -p "$RUN" "$LOGS"
  # The gateway flags of the services that charge, probe and reconcile.
  local gw=()
  case "$GATEWAY" in
    grpc)
      # gateway-sim makes a charge while its request runs (5-30 ms of
      # latency), never after: its longest request is far below gateway.v1's
      # minute, so a lost answer counts as "not charged" after 5 s here
      # (money rule 10). With GATEWAY_FLAGS=--late-record D, raise it to D.
      gw=(--gateway-max-request "$MAX_REQUEST") ;;
    stripe)
      start_stripe_mock
      gw=(--gateway stripe --stripe-key-file "$DATA/stripe-key" --stripe-api-url "http://$STRIPE_MOCK_HTTP") ;;
    *) echo "GATEWAY=$GATEWAY: want grpc or stripe" >&2; exit 2 ;;
  esac
  for b in migrate payments-api admin-api payctl gateway-sim executor sweeper reaper kafka cdc audit-consumer webhook-dispatcher reconciler devcerts; do
    [ -x "$ROOT/bin/$b" ] || { echo "bin/$b is missing: run 'make build'" >&2; exit 1; }
  done
  echo "postgres: 127.0.0.1:$PGPORT (data under .data/pg), events (audit log, webhooks) 127.0.0.1:$EVENTS_PGPORT (.data/pg-events)"
  "$PG" start "$DATA/pg" "$PGPORT"
  "$PG" start "$DATA/pg-events" "$EVENTS_PGPORT"
  "$ROOT/bin/migrate" --database-url "$DB_URL" --audit-database-url "$AUDIT_DB_URL" --webhooks-database-url "$HOOKS_DB_URL" >>"$LOGS/migrate.log" 2>&1 || {
    echo "migration failed; see .data/logs/migrate.log" >&2; tail -n 5 "$LOGS/migrate.log" >&2; exit 1; }
  # gateway-sim serves TLS with a certificate from a development CA made by
  # our own Go code (tools/cmd/devcerts, kept in .data/tls), and wants a
  # bearer token; the services that call it read both from these variables.
  "$ROOT/bin/devcerts" --dir "$DATA/tls" --name gateway-sim --hosts 127.0.0.1,localhost >/dev/null
  # Sweeper to executor is mutual TLS from the same CA: an executor admits
  # only the sweeper's certificate. Every caller of gateway-sim presents its
  # own certificate too (gateway-sim admits executor, reconciler,
  # admin-api and operator: payctl and the demo; each to its methods).
  "$ROOT/bin/devcerts" --dir "$DATA/tls" --name executor --hosts 127.0.0.1,localhost >/dev/null
  local n
  for n in sweeper reconciler admin-api operator; do
    "$ROOT/bin/devcerts" --dir "$DATA/tls" --name "$n" --hosts "$n" >/dev/null
  done
  local exec_tls=(--tls-cert-file "$DATA/tls/executor.pem" --tls-key-file "$DATA/tls/executor-key.pem" --tls-client-ca-file "$DATA/tls/ca.pem")
  gwc() { echo --gateway-cert-file "$DATA/tls/$1.pem" --gateway-key-file "$DATA/tls/$1-key.pem"; }
  export PAYSCHED_GATEWAY_CA_FILE="$DATA/tls/ca.pem" PAYSCHED_GATEWAY_TOKEN_FILE="$DATA/tls/gateway-sim-token"
  # This checkout's own secrets: the API's token and cursor keys, and the
  # webhook key gateway-sim signs with and the reconciler checks.
  local jwt_secret cursor_secret webhook_secret
  jwt_secret=$(secret jwt-secret); cursor_secret=$(secret cursor-secret); webhook_secret=$(secret webhook-secret)
  start_service kafka --kafka-port "$KAFKA_PORT" --kafka-data-dir "$DATA/kafka"
  start_service payments-api --http-addr "$HTTP_ADDR" --grpc-addr "$GRPC_ADDR" --jwt-secret-file "$jwt_secret" \
    --cursor-secret-file "$cursor_secret" --webhooks-database-url "$HOOKS_DB_URL"
  start_service admin-api --http-addr "$ADMIN_HTTP_ADDR" --grpc-addr "$ADMIN_GRPC_ADDR" --jwt-secret-file "$jwt_secret" \
    --audit-database-url "$AUDIT_DB_URL" --webhooks-database-url "$HOOKS_DB_URL" $(gwc admin-api) ${gw[@]+"${gw[@]}"}
  # cdc streams over Postgres's Unix socket where it can (see pkg/events/cdc's
  # pacedConn: cheaper for the walsender than loopback TCP).
  start_service cdc --database-url "$("$PG" socket-url "$DATA/pg" "$PGPORT" paysched)" --kafka-brokers "127.0.0.1:$KAFKA_PORT"
  start_service audit-consumer --audit-database-url "$AUDIT_DB_URL" --kafka-brokers "127.0.0.1:$KAFKA_PORT"
  # Webhooks to the tenants' endpoints; loopback allowed: make demo's
  # receiver listens on 127.0.0.1 (production refuses it).
  start_service webhook-dispatcher --webhooks-database-url "$HOOKS_DB_URL" --kafka-brokers "127.0.0.1:$KAFKA_PORT" --allow-loopback
  start_service reconciler --http-addr 127.0.0.1:9420 --webhook-secret-file "$webhook_secret" $(gwc reconciler) ${gw[@]+"${gw[@]}"} ${RECONCILER_FLAGS:-}
  start_service gateway-sim --gateway-database-url "postgres://postgres@127.0.0.1:$PGPORT/paysched_gateway?sslmode=disable" \
    --webhook-url http://127.0.0.1:9420/webhooks/gateway --webhook-secret-file "$webhook_secret" \
    --tls-cert-file "$DATA/tls/gateway-sim.pem" --tls-key-file "$DATA/tls/gateway-sim-key.pem" --tls-client-ca-file "$DATA/tls/ca.pem" \
    --token-file "$DATA/tls/gateway-sim-token" ${GATEWAY_FLAGS:-}
  local backoff=$BACKOFF
  start_service executor-1 --grpc-addr 127.0.0.1:9100 --http-addr 127.0.0.1:9101 --backoff "$backoff" $(gwc executor) ${gw[@]+"${gw[@]}"} "${exec_tls[@]}" ${EXECUTOR_FLAGS:-}
  start_service executor-2 --grpc-addr 127.0.0.1:9110 --http-addr 127.0.0.1:9111 --backoff "$backoff" $(gwc executor) ${gw[@]+"${gw[@]}"} "${exec_tls[@]}" ${EXECUTOR_FLAGS:-}
  start_service sweeper --executors 127.0.0.1:9100,127.0.0.1:9110 --executor-ca-file "$DATA/tls/ca.pem" \
    --executor-cert-file "$DATA/tls/sweeper.pem" --executor-key-file "$DATA/tls/sweeper-key.pem" ${SWEEPER_FLAGS:-}
  start_service reaper ${REAPER_FLAGS:-}
  if ! "$ROOT/bin/payctl" --api "$GRPC_ADDR" health --wait 30s >/dev/null; then
    echo "payments-api did not become healthy; last log lines:" >&2
    tail -n 20 "$LOGS/payments-api.log" >&2
    exit 1
  fi
  local i
  for i in $(seq 40); do
    PAYSCHED_GATEWAY_CERT_FILE="$DATA/tls/operator.pem" PAYSCHED_GATEWAY_KEY_FILE="$DATA/tls/operator-key.pem" \
      "$ROOT/bin/payctl" gateway report >/dev/null 2>&1 && break
    [ "$i" = 40 ] && { echo "gateway-sim did not answer over TLS; see .data/logs/gateway-sim.log" >&2; exit 1; }
    sleep 0.5
  done
  cat >"$DATA/env" <<ENV
# Written by 'make up'. Source it: . .data/env
export PAYSCHED_DATABASE_URL='$DB_URL'
export PAYSCHED_AUDIT_DATABASE_URL='$AUDIT_DB_URL'
export PAYSCHED_WEBHOOKS_DATABASE_URL='$HOOKS_DB_URL'
export PAYSCHED_API_HTTP='http://$HTTP_ADDR'
export PAYSCHED_API_GRPC='$GRPC_ADDR'
export PAYSCHED_ADMIN_API_GRPC='$ADMIN_GRPC_ADDR'
export PAYSCHED_CONSOLE_URL='http://$ADMIN_HTTP_ADDR/console/'
export PAYSCHED_GATEWAY_ADDR='127.0.0.1:9300'
export PAYSCHED_GATEWAY_CA_FILE='$DATA/tls/ca.pem'
export PAYSCHED_GATEWAY_TOKEN_FILE='$DATA/tls/gateway-sim-token'
export PAYSCHED_GATEWAY_CERT_FILE='$DATA/tls/operator.pem'
export PAYSCHED_GATEWAY_KEY_FILE='$DATA/tls/operator-key.pem'
export PAYSCHED_JWT_SECRET_FILE='$jwt_secret'
export PAYSCHED_KAFKA_BROKERS='127.0.0.1:$KAFKA_PORT'
# The money rules' waits of this stack (make demo's deadline follows from them).
export PAYSCHED_GATEWAY_MAX_REQUEST='$( [ "$GATEWAY" = grpc ] && echo "$MAX_REQUEST" || echo 80s )'
export PAYSCHED_EXECUTOR_BACKOFF='$BACKOFF'
ENV
  cat <<MSG

paysched is up.
  REST     http://$HTTP_ADDR/v1/scheduled-payments   (OpenAPI: http://$HTTP_ADDR/openapi.json)
  gRPC     $GRPC_ADDR   (reflection on: grpcurl -plaintext $GRPC_ADDR list)
  kafka    127.0.0.1:$KAFKA_PORT (data in .data/kafka): kcat -b 127.0.0.1:$KAFKA_PORT -C -t paysched.public.payments -o beginning -e
  events   bin/payctl events tail
  engine   gateway-sim 127.0.0.1:9300 (TLS, CA and token in .data/tls), executors 127.0.0.1:9100 and :9110, sweeper and reaper (metrics :9200, :9210)
  console  http://$ADMIN_HTTP_ADDR/console/   (development login: any name; role admin to act and approve)
  admin    admin-api: REST http://$ADMIN_HTTP_ADDR/v1/admin/..., gRPC $ADMIN_GRPC_ADDR (admin tokens only: bin/payctl token --admin)
  webhooks webhook-dispatcher (metrics :9430) signs and delivers the notifications to each tenant's endpoints (docs/EVENTS.md, Webhooks)
  books    reconciler (webhooks :9420, metrics :9421): bin/payctl reconcile --day \$(date -u +%F); bin/payctl dead-letters
  metrics  payments-api http://127.0.0.1:9190/metrics, admin-api :9191 (apart from the API ports)
  env      . .data/env
  token    TOKEN=\$(bin/payctl token --actor alice)
  try      bin/payctl create --actor alice --payee bob --amount 1500 --due 2m && bin/payctl list --actor alice
  logs     make logs        stop: make down
MSG
  if [ "$GATEWAY" = stripe ]; then cat <<MSG
  stripe   the executors, the reconciler and admin-api use stripe-mock (http://$STRIPE_MOCK_HTTP, key in .data/stripe-key)
           through the Stripe adapter; try: bin/payctl create --actor cus_test/pm_card_visa --payee acct_1Payee --amount 1500 --due 5s
MSG
  fi
}

down() {
  shopt -s nullglob
  # Sweepers first (no new claims), then executors (they finish their
  # batches), then the rest.
  local files=("$RUN"/sweeper*.pid "$RUN"/reaper*.pid "$RUN"/executor*.pid "$RUN"/payments-api.pid "$RUN"/admin-api.pid "$RUN"/gateway-sim.pid
    "$RUN"/reconciler.pid "$RUN"/stripe-mock.pid "$RUN"/cdc.pid "$RUN"/audit-consumer.pid "$RUN"/webhook-dispatcher.pid "$RUN"/kafka.pid)
  for f in "$RUN"/*.pid; do
    case " ${files[*]} " in *" $f "*) ;; *) files+=("$f") ;; esac
  done
  for f in "${files[@]}"; do
    [ -f "$f" ] || continue
    local name pid
    name=$(basename "$f" .pid)
    pid=$(cat "$f")
    if alive "$name"; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 300); do running "$pid" || break; sleep 0.1; done
      running "$pid" && kill -KILL "$pid" 2>/dev/null || true
      echo "stopped $name (pid $pid)"
    fi
    rm -f "$f"
  done
  "$PG" stop "$DATA/pg"
  "$PG" stop "$DATA/pg-events"
  echo "stopped postgres (data kept in .data/pg and .data/pg-events)"
}

logs() {
  shopt -s nullglob
  local files=("$LOGS"/*.log)
  [ ${#files[@]} -gt 0 ] || { echo "no logs yet: run 'make up'"; return; }
  if [ "${FOLLOW:-}" = 1 ]; then tail -n 20 -F "${files[@]}"; else tail -n 50 "${files[@]}"; fi
}

status() {
  shopt -s nullglob
  for f in "$RUN"/*.pid; do
    local name; name=$(basename "$f" .pid)
    if alive "$name"; then echo "$name: running (pid $(cat "$f"))"; else echo "$name: stopped"; fi
  done
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  logs) logs ;;
  status) status ;;
  *) echo "usage: stack.sh up|down|logs|status" >&2; exit 2 ;;
esac
