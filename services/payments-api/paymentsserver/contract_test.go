package paymentsserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/paysched/paysched/gen/openapi"
)

// The REST helpers (e.do, send and the loops that call the API directly)
// pass every response through checkContract: the status must be one the
// OpenAPI documents list for the operation, and the body and headers must
// match what they say. So every REST test is also a test of the documents.

// documents are the served documents (public and admin), converted to
// OpenAPI 3 for kin-openapi's validator, each with its router.
var documents = sync.OnceValues(func() ([]routers.Router, error) {
	var out []routers.Router
	for name, raw := range map[string][]byte{"public": openapi.JSON, "admin": openapi.AdminJSON} {
		var v2 openapi2.T
		if err := json.Unmarshal(raw, &v2); err != nil {
			return nil, fmt.Errorf("%s document: %w", name, err)
		}
		v3, err := openapi2conv.ToV3(&v2)
		if err != nil {
			return nil, fmt.Errorf("%s document: to OpenAPI 3: %w", name, err)
		}
		// Relative to whatever host the test server listens on.
		v3.Servers = nil
		if err := v3.Validate(context.Background()); err != nil {
			return nil, fmt.Errorf("%s document is not valid OpenAPI: %w", name, err)
		}
		r, err := gorillamux.NewRouter(v3)
		if err != nil {
			return nil, fmt.Errorf("%s document: router: %w", name, err)
		}
		out = append(out, r)
	}
	return out, nil
})

// contractOptions: authentication is the server's business (the documents
// only declare it); every error is reported, and an undocumented status is
// one.
var contractOptions = &openapi3filter.Options{
	AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
	IncludeResponseStatus: true,
	MultiError:            true,
}

// contractError says how the response (status, header, body) to req departs
// from the documents; nil when it does not, or when req is not one of their
// operations (an unknown route, a method a path does not have, /healthz...).
func contractError(req *http.Request, status int, header http.Header, body []byte) error {
	if status == http.StatusRequestHeaderFieldsTooLarge && strings.HasPrefix(string(body), "431 ") {
		// net/http's own plain-text answer to oversized headers, written
		// before any API code runs: not an API response (README says so).
		return nil
	}
	docs, err := documents()
	if err != nil {
		return err
	}
	for _, r := range docs {
		route, params, err := r.FindRoute(req)
		if errors.Is(err, routers.ErrPathNotFound) || errors.Is(err, routers.ErrMethodNotAllowed) {
			continue
		}
		if err != nil {
			return fmt.Errorf("route %s %s: %w", req.Method, req.URL.Path, err)
		}
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{
				Request: req, PathParams: params, Route: route, Options: contractOptions,
			},
			Status:  status,
			Header:  header,
			Options: contractOptions,
		}
		in.SetBodyBytes(body)
		if err := openapi3filter.ValidateResponse(req.Context(), in); err != nil {
			return fmt.Errorf("%s %s (%s) answered %d, which its OpenAPI document does not allow: %w\nbody: %.2000s",
				req.Method, req.URL.RequestURI(), route.Operation.OperationID, status, err, body)
		}
		return nil
	}
	return nil
}

// checkContract fails t when the response departs from the documents.
func checkContract(t testing.TB, req *http.Request, status int, header http.Header, body []byte) {
	t.Helper()
	if err := contractError(req, status, header, body); err != nil {
		t.Error(err)
	}
}

// The validator itself must refuse what the documents do not allow, or the
// check above proves nothing.
func TestContractCheckRefuses(t *testing.T) {
	hdr := http.Header{"Content-Type": {"application/json"}}
	payment := `{"paymentId":"p","amount":5,"status":"PENDING","metadata":{},"attempts":[]}`
	status := `{"code":3,"message":"bad","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"X"}]}`
	cases := []struct {
		name, method, path string
		status             int
		body               string
		ok                 bool
	}{
		{"create 201", "POST", "/v1/scheduled-payments", 201, payment, true},
		{"create 200 is not documented", "POST", "/v1/scheduled-payments", 200, payment, false},
		{"create 404 is not documented", "POST", "/v1/scheduled-payments", 404, status, false},
		{"amount as a string", "POST", "/v1/scheduled-payments", 201, `{"amount":"5"}`, false},
		{"null payment in a batch result", "POST", "/v1/scheduled-payments:batchCreate", 200,
			`{"results":[{"index":0,"outcome":"OUTCOME_REJECTED","payment":null}]}`, false},
		{"error without @type", "GET", "/v1/scheduled-payments/x", 404, `{"code":5,"message":"m","details":[{"reason":"X"}]}`, false},
		{"error 404", "GET", "/v1/scheduled-payments/x", 404, status, true},
		{"admin 403", "GET", "/v1/admin/dead-letters", 403, status, true},
		{"public 403 is not documented", "GET", "/v1/scheduled-payments", 403, status, false},
		{"unknown route is not checked", "GET", "/v1/nope", 418, "x", true},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, "http://127.0.0.1:1"+c.path, nil)
		err := contractError(req, c.status, hdr, []byte(c.body))
		if (err == nil) != c.ok {
			t.Errorf("%s: error %v, want ok=%v", c.name, err, c.ok)
		}
	}
	// The public document has no admin route.
	var pub openapi2.T
	if err := json.Unmarshal(openapi.JSON, &pub); err != nil {
		t.Fatal(err)
	}
	for p := range pub.Paths {
		if strings.HasPrefix(p, "/v1/admin") {
			t.Errorf("the public document has the admin route %s", p)
		}
	}
}
