#!/usr/bin/env bash
# `make test`: installs what is missing (the PostgreSQL server package, the
# pinned Go tools, Debian's chromium for the console's browser tests),
# checks formatting, vet, buf lint and that generated code is in sync, then
# runs every Go test against one private, throwaway Postgres cluster.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PG="$ROOT/deploy/local/pg.sh"

step() { printf '\n== %s\n' "$*"; }

step "install what is missing"
"$PG" install
"$ROOT/deploy/local/tools.sh"
"$ROOT/deploy/local/browser.sh"

step "gofmt, go vet, buf lint, generated code in sync (protobuf, OpenAPI, sqlc)"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.tools/*'))
if [ -n "$unformatted" ]; then echo "gofmt needed: $unformatted" >&2; exit 1; fi
# The Go SDK (sdk/go) is a module of its own in the workspace (go.work):
# its packages are named beside the server's.
go vet ./... ./sdk/go/...
# Real linters beside vet (generated code aside): staticcheck for bugs
# (an error shadowed, a value never used), deprecated calls, dead code and
# doc comments that name what they document (staticcheck.conf); errcheck
# for every error dropped unsaid (.errcheck-excludes says which may be).
lintpkgs=$(cd "$ROOT" && go list ./... ./sdk/go/... | grep -v /gen/ | grep -v /sdk/go/api$)
"$ROOT/.tools/staticcheck" $lintpkgs
"$ROOT/.tools/errcheck" -exclude "$ROOT/.errcheck-excludes" $lintpkgs
"$ROOT/deploy/local/proto.sh" check
# The statements' Go is sqlc's, from each area's .sql file checked against
# the migrations (sqlc.yaml): stale generated code fails here.
"$ROOT/.tools/sqlc" diff

step "go test (one private postgres for the run)"
# tools.sh installed stripe-mock: its contract test must run, not skip.
export PAYSCHED_REQUIRE_STRIPE_MOCK=1
# The generated-client test (test/openapiclient) needs node and npm: fail,
# not skip, when they are missing.
export PAYSCHED_REQUIRE_NODE=1
# The console's real-browser tests (test/e2e) need chromium: fail, not skip.
export PAYSCHED_REQUIRE_BROWSER=1
"$ROOT/deploy/local/with-pg.sh" go test -race -count=1 -timeout 20m ${GOTESTFLAGS:-} ./... ./sdk/go/...
