package openapi

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// TestOpenAPI3RenderingsMatch: each OpenAPI 3 rendering is a valid document
// with the same operations and statuses as the Swagger document it was
// generated from (proto.sh check keeps it in sync byte for byte).
func TestOpenAPI3RenderingsMatch(t *testing.T) {
	for name, docs := range map[string][2][]byte{"public": {JSON, JSONv3}, "admin": {AdminJSON, AdminJSONv3}} {
		v3, err := openapi3.NewLoader().LoadFromData(docs[1])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := v3.Validate(context.Background()); err != nil {
			t.Fatalf("%s: invalid OpenAPI 3: %v", name, err)
		}
		var v2 struct {
			Paths map[string]map[string]struct {
				Responses map[string]any `json:"responses"`
			} `json:"paths"`
		}
		if err := json.Unmarshal(docs[0], &v2); err != nil {
			t.Fatal(err)
		}
		for path, ops := range v2.Paths {
			item := v3.Paths.Find(path)
			if item == nil {
				t.Fatalf("%s: %s missing from the OpenAPI 3 rendering", name, path)
			}
			for method, op := range ops {
				o := item.GetOperation(strings.ToUpper(method))
				if o == nil {
					t.Fatalf("%s: %s %s missing", name, method, path)
				}
				var want, got []string
				for code := range op.Responses {
					want = append(want, code)
				}
				for code := range o.Responses.Map() {
					got = append(got, code)
				}
				slices.Sort(want)
				slices.Sort(got)
				if !slices.Equal(want, got) {
					t.Fatalf("%s: %s %s statuses %v, Swagger %v", name, method, path, got, want)
				}
			}
		}
	}
}
