# paysched — see README.md. Every target is a thin wrapper over deploy/local/.
SHELL := /bin/bash
export PATH := $(CURDIR)/.tools:$(PATH)

.PHONY: help up demo down logs status build test proto proto-check sqlc helm-sync helm-readme tools lint fuzz bench bench-engine bench-api bench-recon bench-full bench-steady bench-sync bench-fair bench-console bench-webhooks bench-schedules bench-compare console-shots chaos clean

help:
	@echo "make up         build and start the local stack (Postgres, payments-api and the engine)"
	@echo "make demo       make up, then schedule a few hundred payments due within seconds and watch them"
	@echo "make test       install what is missing and run every check and test"
	@echo "make down       stop the local stack (data stays in .data/)"
	@echo "make logs       show service logs (FOLLOW=1 to follow)"
	@echo "make proto      lint protos and regenerate gen/ with pinned plugins"
	@echo "make sqlc       regenerate the statements' Go from each area's .sql file (sqlc.yaml)"
	@echo "make fuzz       fuzz the create request for 60 s"
	@echo "make bench      the due-time spike: N=200000 payments due in one second (make bench N=... CDC=1)"
	@echo "make bench-api  API create throughput and latency"
	@echo "make chaos      kill -9, restarts and SIGTERMs while 20,000 payments fall due; check every invariant (SHORT=1: CI variant)"
	@echo "make bench-full 1,000,000 payments due in one second, every process running, cdc and audit included"
	@echo "make bench-recon reconcile a day of N=1000000 attempts against the gateway's report"
	@echo "make bench-console seed N=5000000 payments with COPY and time every console page (p99 target 200 ms)"
	@echo "make bench-fair  fair claims: one tenant of N=200000 and 100 of 100 due together, fair against due order"
	@echo "make bench-steady RATE=1000 payments due every second for STEADY_FOR=120s, full stack with CDC and gateway faults"
	@echo "make bench-webhooks N=100000 payments executed, their notifications signed and delivered to 3 tenants' endpoints (one failing, one hanging); SOURCE=notifications: the dispatcher alone"
	@echo "make bench-schedules the recurring schedules' planner: SCHEDULES (1,000,000) monthly schedules in every zone, planned beside make bench's engine figure"
	@echo "make bench-compare BASE=<rev> [BENCH=bench] [PAIRS=5] [METRIC=executed_per_s]: alternated pairs of BASE and HEAD, each pair's ratio and their median (BASE unset: BASE_BENCH against BENCH on HEAD)"
	@echo "make console-shots retake docs/console's screenshots in headless chromium (the console's browser tests)"
	@echo "make bench-sync what a synchronous standby costs an acknowledged write (API creates, pgbench), async against sync"

build:
	@mkdir -p bin
	go build -o bin/ ./services/... ./tools/cmd/...

up: build
	@deploy/local/stack.sh up

demo: up
	@. .data/env && bin/demo

down:
	@deploy/local/stack.sh down

logs:
	@deploy/local/stack.sh logs

status:
	@deploy/local/stack.sh status

test:
	@deploy/local/test.sh

tools:
	@deploy/local/tools.sh

proto:
	@deploy/local/proto.sh gen

# The Helm chart carries the kustomize base (the source of truth) as files.
helm-sync:
	@for f in deploy/k8s/base/*.yaml; do [ "$$(basename $$f)" = kustomization.yaml ] || cp $$f deploy/helm/paysched/files/base/; done

# The chart README's parameter table, from values.yaml's @param comments.
helm-readme:
	@cd deploy/k8s/testdata/readme && npm ci --prefer-offline --no-audit --no-fund --loglevel=error && \
		npx --no-install readme-generator --values ../../../helm/paysched/values.yaml --readme ../../../helm/paysched/README.md

proto-check:
	@deploy/local/proto.sh check

# The Go of every static statement, from its area's .sql file (sqlc.yaml).
sqlc: tools
	@.tools/sqlc generate

lint: tools
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	go vet ./... ./sdk/go/...
	.tools/staticcheck $$(go list ./... ./sdk/go/... | grep -v /gen/ | grep -v /sdk/go/api$$)
	.tools/errcheck -exclude .errcheck-excludes $$(go list ./... ./sdk/go/... | grep -v /gen/ | grep -v /sdk/go/api$$)
	.tools/buf lint
	.tools/sqlc diff
	go test -count=1 ./test/layout/

FUZZTIME ?= 60s
fuzz:
	@deploy/local/with-pg.sh go test -run '^$$' -fuzz FuzzCreateREST -fuzztime $(FUZZTIME) -fuzzminimizetime 3s ./services/payments-api/paymentsserver

bench: bench-engine

bench-engine: build
	@N=$(or $(N),200000) CDC=$(CDC) deploy/local/bench-engine.sh

# Fair claims: one tenant of N (200,000) and 100 of 100 due together, fair
# against due order, beside make bench's spike (docs/PERFORMANCE.md).
bench-fair: build
	@N=$(or $(N),200000) RUNS=$(or $(RUNS),1) deploy/local/bench-fair.sh

bench-api: build
	@deploy/local/bench-api.sh

bench-full: build
	@N=$(or $(N),1000000) CDC=1 deploy/local/bench-engine.sh

bench-steady: build
	@deploy/local/bench-steady.sh

chaos: build
	@deploy/local/chaos.sh

bench-sync: build
	@deploy/local/bench-sync.sh

bench-recon: build
	@N=$(or $(N),1000000) deploy/local/bench-recon.sh

bench-console: build
	@N=$(or $(N),5000000) deploy/local/bench-console.sh

bench-webhooks: build
	@deploy/local/bench-webhooks.sh

bench-schedules: build
	@SCHEDULES=$(or $(SCHEDULES),1000000) PLANNERS=$(or $(PLANNERS),2) deploy/local/bench-schedules.sh

# Alternated pairs and their median ratio (docs/PERFORMANCE.md): every
# "not slower" and every ratio target is judged by it.
bench-compare:
	@BASE=$(BASE) BENCH="$(or $(BENCH),bench)" BASE_BENCH="$(BASE_BENCH)" PAIRS=$(or $(PAIRS),5) METRIC=$(or $(METRIC),executed_per_s) deploy/local/bench-compare.sh

console-shots:
	@PAYSCHED_CONSOLE_SHOTS=$(CURDIR)/docs/console deploy/local/with-pg.sh go test -count=1 -run 'Console' ./test/e2e

clean:
	rm -rf bin
