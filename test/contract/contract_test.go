// Package contract holds the REST contract to its promises: the OpenAPI
// documents lint clean under a maintained linter (Redocly CLI, its rules
// in redocly.yaml), their operation ids are simple and unique, and nothing
// in them breaks a client of the last released documents
// (proto/paysched/v1/released, compared by oasdiff): a deliberate break
// updates the released documents in the same commit, with its line in
// CHANGELOG.md.
package contract

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/paysched/paysched/test/nodetest"

	paysched "github.com/paysched/paysched/sdk/go"
)

// docs are the documents, generated (gen/) and released.
var docs = []string{"payments", "admin"}

func current(name string) string {
	p, _ := filepath.Abs(filepath.Join("..", "..", "gen", "openapi", "paysched", "v1", name+".openapi3.json"))
	return p
}

func released(name string) string {
	p, _ := filepath.Abs(filepath.Join("..", "..", "proto", "paysched", "v1", "released", name+".openapi3.json"))
	return p
}

func readDoc(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return d
}

func TestTheDocumentsLintClean(t *testing.T) {
	nodetest.Require(t, "the contract's lint", "node", "npm")
	dir := nodetest.Install(t, "package.json", "package-lock.json", "redocly.yaml")
	args := []string{"lint", "--config", "redocly.yaml", "--format", "summary"}
	for _, d := range docs {
		args = append(args, current(d))
	}
	out := nodetest.Run(t, dir, []string{"REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true"},
		filepath.Join(dir, "node_modules", ".bin", "redocly"), args...)
	if strings.Contains(out, "error ") || strings.Contains(out, "warning ") {
		t.Fatalf("the linter found problems:\n%s", out)
	}
}

func TestOperationIDsAreSimpleAndUnique(t *testing.T) {
	simple := regexp.MustCompile(`^[A-Z][A-Za-z0-9]+$`)
	seen := map[string]string{}
	for _, d := range docs {
		paths, _ := readDoc(t, current(d))["paths"].(map[string]any)
		for p, item := range paths {
			ops, _ := item.(map[string]any)
			for method, op := range ops {
				id, _ := op.(map[string]any)["operationId"].(string)
				where := d + " " + strings.ToUpper(method) + " " + p
				if !simple.MatchString(id) {
					t.Errorf("%s: operation id %q is not a simple name", where, id)
				}
				if other, dup := seen[id]; dup {
					t.Errorf("%s and %s share the operation id %q", where, other, id)
				}
				seen[id] = where
			}
		}
	}
	if len(seen) < 40 {
		t.Fatalf("%d operations: the documents are not what this test reads", len(seen))
	}
}

// oasdiff is the pinned oasdiff (deploy/local/tools.sh installs it).
func oasdiff(t *testing.T) string {
	t.Helper()
	p, _ := filepath.Abs(filepath.Join("..", "..", ".tools", "oasdiff"))
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: run deploy/local/tools.sh (make test does)", p)
	}
	return p
}

// breaking runs oasdiff breaking base rev and returns its output and
// whether it found a breaking change (ERR).
func breaking(t *testing.T, base, rev string) (string, bool) {
	t.Helper()
	out, err := exec.Command(oasdiff(t), "breaking", base, rev, "--fail-on", "ERR").CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), false
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return string(out), true
	}
	t.Fatalf("oasdiff: %v\n%s", err, out)
	return "", false
}

func TestNothingBreaksTheReleasedContract(t *testing.T) {
	for _, d := range docs {
		if out, broke := breaking(t, released(d), current(d)); broke {
			t.Errorf("the %s API breaks its released contract (proto/paysched/v1/released): if deliberate, copy %s there and say why in CHANGELOG.md\n%s",
				d, current(d), out)
		}
	}
}

// TestTheCheckCatchesABreak: the comparison would fail on an operation
// removed and on a field whose type changed.
func TestTheCheckCatchesABreak(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(d map[string]any)
	}{
		{"an operation removed", func(d map[string]any) {
			delete(d["paths"].(map[string]any), "/v1/schedules/{scheduleId}:pause")
		}},
		{"a field's type changed", func(d map[string]any) {
			schemas := d["components"].(map[string]any)["schemas"].(map[string]any)
			props := schemas["v1ScheduledPayment"].(map[string]any)["properties"].(map[string]any)
			props["amount"] = map[string]any{"type": "string"}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := readDoc(t, released("payments"))
			c.edit(d)
			b, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			edited := filepath.Join(t.TempDir(), "payments.json")
			if err := os.WriteFile(edited, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if out, broke := breaking(t, released("payments"), edited); !broke {
				t.Fatalf("oasdiff did not call it breaking:\n%s", out)
			}
		})
	}
}

// TestTheReleasedContractIsInTheChangelog: each released document's
// version has its entry in CHANGELOG.md.
func TestTheReleasedContractIsInTheChangelog(t *testing.T) {
	log, err := os.ReadFile(filepath.Join("..", "..", "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		info, _ := readDoc(t, released(d))["info"].(map[string]any)
		v, _ := info["version"].(string)
		entry := d + " API " + v
		if v == "" || !strings.Contains(string(log), entry) {
			t.Errorf("CHANGELOG.md has no entry %q for the released %s document", entry, d)
		}
	}
}

// TestTheSDKsCoverEveryOperation: every operation of the public document
// has its SDK methods (sdk/operations.json), and the Go SDK has each.
func TestTheSDKsCoverEveryOperation(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "sdk", "operations.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ops map[string]json.RawMessage
	if err := json.Unmarshal(b, &ops); err != nil {
		t.Fatal(err)
	}
	client := reflect.TypeOf(&paysched.Client{})
	paths, _ := readDoc(t, current("payments"))["paths"].(map[string]any)
	n := 0
	for _, item := range paths {
		for _, op := range item.(map[string]any) {
			id, _ := op.(map[string]any)["operationId"].(string)
			n++
			var m struct{ Go, TS string }
			if err := json.Unmarshal(ops[id], &m); err != nil || m.Go == "" || m.TS == "" {
				t.Errorf("operation %s has no SDK methods in sdk/operations.json", id)
				continue
			}
			if _, ok := client.MethodByName(m.Go); !ok {
				t.Errorf("operation %s: the Go SDK has no method %s", id, m.Go)
			}
		}
	}
	if n != len(ops)-1 { // the "//" note
		t.Errorf("the document has %d operations, sdk/operations.json %d", n, len(ops)-1)
	}
}
