// Command openapi3 renders an OpenAPI 2 (Swagger) document as OpenAPI 3
// with kin-openapi's converter, validating the result: proto.sh runs it on
// the documents protoc-gen-openapiv2 writes (which only writes version 2),
// so the OpenAPI 3 renderings in gen/ are generated, never hand-edited.
//
//	openapi3 IN.swagger.json OUT.openapi3.json
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: openapi3 IN.swagger.json OUT.openapi3.json")
		os.Exit(2)
	}
	if err := convert(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "openapi3:", err)
		os.Exit(1)
	}
}

func convert(in, out string) error {
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var v2 openapi2.T
	if err := json.Unmarshal(b, &v2); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	v3, err := openapi2conv.ToV3(&v2)
	if err != nil {
		return fmt.Errorf("convert %s: %w", in, err)
	}
	if len(v3.Servers) == 0 {
		// The document is served by the API it describes (GET
		// /v1/openapi.json): its paths are relative to that host.
		v3.Servers = openapi3.Servers{{URL: "/", Description: "the host that serves this document"}}
	}
	if err := v3.Validate(context.Background()); err != nil {
		return fmt.Errorf("the OpenAPI 3 rendering of %s is invalid: %w", in, err)
	}
	js, err := json.MarshalIndent(v3, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(out, append(js, '\n'), 0o644)
}
