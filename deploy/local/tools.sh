#!/usr/bin/env bash
# Installs the pinned code-generation and test tools into .tools/ from the Go
# module proxy, skipping those already at the right version. stripe-mock is
# the Stripe API mock the Stripe adapter's contract test (test/stripemock)
# and `GATEWAY=stripe make up` run.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export GOBIN="$ROOT/.tools"
mkdir -p "$GOBIN"
tools=(
  "buf github.com/bufbuild/buf/cmd/buf@v1.75.0"
  "protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12"
  "protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0"
  "protoc-gen-grpc-gateway github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@v2.33.0"
  "protoc-gen-openapiv2 github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@v2.33.0"
  "stripe-mock github.com/stripe/stripe-mock@v0.203.0"
  "staticcheck honnef.co/go/tools/cmd/staticcheck@v0.8.2"
  "errcheck github.com/kisielk/errcheck@v1.30.0"
  "oasdiff github.com/oasdiff/oasdiff@v1.39.0"
  "oapi-codegen github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2"
  "helm helm.sh/helm/v4/cmd/helm@v4.3.2"
  # cgo: sqlc parses with PostgreSQL's own parser (pg_query).
  "sqlc github.com/sqlc-dev/sqlc/cmd/sqlc@v1.31.1"
)
for t in "${tools[@]}"; do
  read -r name pkg <<<"$t"
  stamp="$GOBIN/.$name.version"
  if [ -x "$GOBIN/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$pkg" ]; then continue; fi
  echo "tools: installing $pkg" >&2
  go install "$pkg"
  echo "$pkg" >"$stamp"
done
