// Package local holds the scripts that run paysched on one machine; its
// test parses them.
package local

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestScriptsParse runs `bash -n` over every script and over every script
// body handed to `bash -c '...'`. Such a body is a single-quoted string: an
// apostrophe in one of its comments ends it early, and bash -n over the
// file alone does not notice when a second apostrophe closes the quote
// again (a comment's "the schedule's" broke make bench this way).
func TestScriptsParse(t *testing.T) {
	scripts, err := filepath.Glob("*.sh")
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, path := range scripts {
		t.Run(path, func(t *testing.T) {
			if out, err := exec.Command("bash", "-n", path).CombinedOutput(); err != nil {
				t.Fatalf("bash -n: %v\n%s", err, out)
			}
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for i, body := range inlineBodies(string(src)) {
				// '"$VAR"' splices a value in; any other apostrophe ends
				// the quoting wherever it stands, comments included.
				if strings.Contains(splice.ReplaceAllString(body, ""), "'") {
					t.Errorf("inline script %d holds an apostrophe, which ends its quoting", i)
				}
				cmd := exec.Command("bash", "-n")
				cmd.Stdin = strings.NewReader(body)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("inline script %d: bash -n: %v\n%s", i, err, out)
				}
			}
		})
	}
}

var splice = regexp.MustCompile(`'"[^"']*"'`)

// inlineBodies returns the bodies of `bash -c '` blocks that run to a line
// holding only the closing quote, the form the scripts use.
func inlineBodies(src string) []string {
	var bodies []string
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		if !strings.HasSuffix(strings.TrimSpace(lines[i]), "bash -c '") {
			continue
		}
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "'"; i++ {
			body = append(body, lines[i])
		}
		bodies = append(bodies, strings.Join(body, "\n"))
	}
	return bodies
}
