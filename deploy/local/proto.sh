#!/usr/bin/env bash
# proto.sh gen    lint the protos and regenerate gen/ with the pinned plugins
# proto.sh check  fail if regenerating would change gen/ (CI runs this)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
"$ROOT/deploy/local/tools.sh"
BUF="$ROOT/.tools/buf"
"$BUF" lint
gen() { # gen OUTDIR
  "$BUF" generate -o "$1"
  "$BUF" generate --template buf.gen.rest.yaml --path proto/paysched/v1 -o "$1"
  "$BUF" generate --template buf.gen.openapi.yaml --path proto/paysched/v1 -o "$1"
  # protoc-gen-openapiv2 writes OpenAPI 2 only: render each document as
  # OpenAPI 3 too (tools/cmd/openapi3, kin-openapi's converter), here, so
  # that `check` reproduces it.
  local d
  for d in payments admin; do
    go run ./tools/cmd/openapi3 "$1/gen/openapi/paysched/v1/$d.swagger.json" "$1/gen/openapi/paysched/v1/$d.openapi3.json"
  done
  # The Go SDK's generated layer, from the public document.
  local out
  mkdir -p "$1/sdk/go/api"
  out=$(cd "$1" && pwd)
  (cd sdk/go/api && "$ROOT/.tools/oapi-codegen" -config oapi-codegen.yaml -o "$out/sdk/go/api/api.gen.go" \
    "$out/gen/openapi/paysched/v1/payments.openapi3.json")
}
case "${1:-gen}" in
  gen)
    gen .
    # The TypeScript SDK's types, from the same document (test/sdkts
    # fails when they are stale).
    if command -v npm >/dev/null; then
      (cd sdk/ts && npm ci --prefer-offline --no-audit --no-fund --loglevel=error && npm run --silent generate)
    else
      echo "proto.sh: npm not found: sdk/ts/src/schema.ts not regenerated" >&2
    fi
    ;;
  check)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    gen "$tmp"
    # Compare generated files only; gen/ also holds hand-written embed code.
    status=0
    while IFS= read -r f; do
      rel=${f#"$tmp/"}
      if ! cmp -s "$f" "$ROOT/$rel"; then echo "out of date: $rel (run 'make proto')" >&2; status=1; fi
    done < <(find "$tmp" -type f)
    while IFS= read -r f; do
      [ -f "$tmp/$f" ] || { echo "stale generated file: $f (run 'make proto')" >&2; status=1; }
    done < <(find gen sdk/go/api -type f \( -name '*.pb.go' -o -name '*.pb.gw.go' -o -name '*.swagger.json' -o -name '*.openapi3.json' -o -name '*.gen.go' \))
    exit $status
    ;;
  *) echo "usage: proto.sh gen|check" >&2; exit 2 ;;
esac
