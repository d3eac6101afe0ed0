package payment_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paysched/paysched/pkg/payment"
)

var update = flag.Bool("update", false, "rewrite the state diagram in docs/DESIGN.md from payment.Moves")

const (
	begin = "<!-- state-machine:begin (generated: go test ./pkg/payment -run TestDiagramMatchesDesign -update) -->\n"
	end   = "<!-- state-machine:end -->"
)

// TestDiagramMatchesDesign keeps docs/DESIGN.md's state diagram equal to
// payment.Moves, the table the code enforces.
func TestDiagramMatchesDesign(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "DESIGN.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no state-machine block (%q ... %q)", path, begin, end)
	}
	want := "```mermaid\n" + payment.Mermaid() + "```\n"
	got := doc[i+len(begin) : j]
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(doc[:i+len(begin)]+want+doc[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("docs/DESIGN.md's state diagram differs from payment.Moves; run with -update.\ngot:\n%s\nwant:\n%s", got, want)
}

func TestMovesNameKnownStatuses(t *testing.T) {
	for _, m := range payment.Moves {
		if !m.From.Valid() || !m.To.Valid() || m.From == m.To || m.Name == "" {
			t.Errorf("bad move %+v", m)
		}
		if m.From.Terminal() && m.By != payment.Reconciler {
			t.Errorf("%+v leaves a terminal status: only the reconciler's repair may", m)
		}
	}
}
