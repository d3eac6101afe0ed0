// Package layout_test keeps the house rules of the repository true: imports
// run down the floors (layers), product services link no tool or test code,
// only pkg/store writes the payment tables, and only pkg/payment and
// pkg/store spell statuses as strings.
package layout_test

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const module = "github.com/paysched/paysched"

// root is the repository root, two levels up from this package.
var root = filepath.Join("..", "..")

func TestProductServicesLinkNoToolsOrTests(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join(root, "services"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./services/"+e.Name())
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", e.Name(), err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, module+"/tools/") || strings.HasPrefix(dep, module+"/test/") ||
				strings.Contains(dep, "/kfake") {
				t.Errorf("services/%s links %s", e.Name(), dep)
			}
		}
	}
}

// TestPaymentsAPILinksNoAdminSide: payments-api is the internet's door. It
// never dials the gateway or serves an operator, and its binary carries
// none of the code that would: no gateway client (dial, Stripe), no
// console, no admin service, no reconciler. A bug or a gadget there is
// then not in the process the internet reaches.
func TestPaymentsAPILinksNoAdminSide(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./services/payments-api")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list payments-api: %v", err)
	}
	refused := []string{"/pkg/gateway/dial", "/pkg/gateway/stripe", "/pkg/console", "/pkg/api/admin", "/pkg/reconcile"}
	for _, dep := range strings.Fields(string(out)) {
		for _, r := range refused {
			if dep == module+r || strings.HasPrefix(dep, module+r+"/") {
				t.Errorf("services/payments-api links %s: the admin side belongs to admin-api", dep)
			}
		}
	}
}

// goFiles calls f for every non-test Go file under dirs.
func goFiles(t *testing.T, dirs []string, f func(path string, src []byte)) {
	t.Helper()
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			f(filepath.ToSlash(rel), src)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

var writes = regexp.MustCompile(`(?i)\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM|COPY)\s+(payments|payment_attempts|payment_actions)\b`)

func TestOnlyTheStoreWritesPayments(t *testing.T) {
	goFiles(t, []string{"pkg", "services"}, func(path string, src []byte) {
		if strings.HasPrefix(path, "pkg/store/") {
			return
		}
		for _, m := range writes.FindAll(src, -1) {
			t.Errorf("%s writes a payment table (%s): that statement belongs in pkg/store", path, m)
		}
	})
}

var statusLiteral = regexp.MustCompile(`["'](PENDING|PROCESSING|COMPLETED|FAILED|CANCELLED|DEAD_LETTERED|SUCCEEDED|DECLINED|RETRYABLE|AMBIGUOUS|ABANDONED|RETRIES_EXHAUSTED|AMBIGUOUS_UNRESOLVED)["']`)

func TestStatusesAreTyped(t *testing.T) {
	goFiles(t, []string{"pkg", "services", "tools"}, func(path string, src []byte) {
		if strings.HasPrefix(path, "pkg/payment/") || strings.HasPrefix(path, "pkg/store/") {
			return
		}
		for i, line := range bytes.Split(src, []byte("\n")) {
			if m := statusLiteral.Find(line); m != nil {
				t.Errorf("%s:%d: status literal %s: use the pkg/payment constants", path, i+1, m)
			}
		}
	})
}

// TestImageContextLeavesOutLocalState: the image builds from the repository
// root with `COPY . .`, so .dockerignore must keep the local stack's data
// (databases, Kafka logs, generated secrets and the development CA in
// .data), the tools, the binaries, git and node_modules out of it.
func TestImageContextLeavesOutLocalState(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatalf("no .dockerignore: %v", err)
	}
	have := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			have[strings.TrimSuffix(strings.TrimPrefix(line, "/"), "/")] = true
		}
	}
	for _, want := range []string{".data", ".tools", ".git", "bin", "**/node_modules"} {
		if !have[want] {
			t.Errorf(".dockerignore does not leave out %s", want)
		}
	}
}

// TestBaseImagesArePinnedByDigest: every image the Dockerfile builds on is
// pinned by its digest, so a moved tag cannot change what ships; a stage
// built on an earlier stage names that stage.
func TestBaseImagesArePinnedByDigest(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "deploy/docker/Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	pinned := regexp.MustCompile(`^[^@\s]+:[^@\s]+@sha256:[0-9a-f]{64}$`)
	stages := map[string]bool{}
	froms := 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.EqualFold(f[0], "FROM") {
			continue
		}
		froms++
		if !stages[f[1]] && !pinned.MatchString(f[1]) {
			t.Errorf("FROM %s: want image:tag@sha256:<digest>", f[1])
		}
		if len(f) == 4 && strings.EqualFold(f[2], "AS") {
			stages[f[3]] = true
		}
	}
	if froms == 0 {
		t.Fatal("no FROM line in the Dockerfile")
	}
}

// waitsForTheClock finds a test computing the time left to the next
// midnight: a test must not depend on the hour it runs at, nor wait one
// out (a fixed day, or an injected clock, instead).
var waitsForTheClock = regexp.MustCompile(`Truncate\(24 \* time\.Hour\)|[wW]aitOutMidnight|time\.Until\([^)]*AddDate\(0, 0, 1\)`)

func TestNoTestWaitsForTheClock(t *testing.T) {
	for _, dir := range []string{"pkg", "services", "tools", "test", "deploy"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for i, line := range bytes.Split(src, []byte("\n")) {
				if m := waitsForTheClock.Find(line); m != nil && !bytes.Contains(line, []byte("waitsForTheClock")) {
					rel, _ := filepath.Rel(root, path)
					t.Errorf("%s:%d: %s: a test must pass at any hour without waiting for one (use a fixed day or an injected clock)", rel, i+1, m)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// layers are the house's floors, lowest first: a package imports from its
// own floor or below, never above, so the libraries never know the
// processes assembled from them. The longest matching prefix decides.
var layers = [][]string{
	{"gen", "pkg/payment", "pkg/recurrence", "pkg/platform"},
	{"pkg/store", "pkg/gateway", "pkg/events/kafka", "pkg/events/envelope", "pkg/events/notification"},
	{"pkg/engine", "pkg/events", "pkg/reconcile"},
	{"pkg/api"},
	{"pkg/console", "pkg/cli"},
	{"services"},
}

// layerOf is the floor of an import path of the module, or -1 (tools and
// test harnesses stand outside the product's floors).
func layerOf(path string) int {
	rel, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return -1
	}
	best, floor := -1, -1
	for i, fl := range layers {
		for _, p := range fl {
			if (rel == p || strings.HasPrefix(rel, p+"/")) && len(p) > best {
				best, floor = len(p), i
			}
		}
	}
	return floor
}

func TestLayersImportDownward(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./gen/...", "./pkg/...", "./services/...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		from := layerOf(f[0])
		if from < 0 {
			t.Errorf("%s stands on no floor: add its prefix to layers", f[0])
			continue
		}
		for _, imp := range f[1:] {
			if to := layerOf(imp); to > from {
				t.Errorf("%s (floor %d) imports %s (floor %d): an import runs up the house", f[0], from, imp, to)
			}
		}
	}
}

// TestLayersRefuseAnUpwardImport shows the rule would catch the import
// that once ran back up: pkg/api's admin-api wiring importing the console.
func TestLayersRefuseAnUpwardImport(t *testing.T) {
	if api, console := layerOf(module+"/pkg/api/server"), layerOf(module+"/pkg/console"); api >= console {
		t.Fatalf("pkg/api (floor %d) may import pkg/console (floor %d)", api, console)
	}
	if layerOf(module+"/pkg/events/tenanthook") <= layerOf(module+"/pkg/events/kafka") {
		t.Fatal("the longest prefix does not decide a package's floor")
	}
}
