// Package nodetest runs the tests' Node programs (a generated REST client,
// a kafkajs consumer): it requires node and npm, installs a test's pinned
// packages into a copy of its folder and runs commands there.
package nodetest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// RequireEnv set to 1 makes a missing tool a failure, not a skip
// (deploy/local/test.sh sets it).
const RequireEnv = "PAYSCHED_REQUIRE_NODE"

// Require skips t (or fails it under RequireEnv=1) when a tool is missing.
func Require(t *testing.T, what string, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv(RequireEnv) == "1" {
				t.Fatalf("%s is required (%s=1): %v", tool, RequireEnv, err)
			}
			t.Skipf("%s not found: install Node 20 and npm to run %s", tool, what)
		}
	}
}

// Install copies files (package.json, package-lock.json and the programs)
// from the test's folder to a temporary one and runs `npm ci` there, so the
// repository gets no node_modules; npm's cache (~/.npm unless
// npm_config_cache says otherwise) makes it cheap after the first run. It
// returns the folder.
func Install(t *testing.T, files ...string) string {
	t.Helper()
	return InstallFrom(t, ".", files...)
}

// InstallFrom is Install of files (paths relative to from, kept so in the
// copy) from another folder: a package of the repository (sdk/ts).
func InstallFrom(t *testing.T, from string, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(from, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	Run(t, dir, nil, "npm", "ci", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error")
	return dir
}

// Run runs a command in dir with env added and fails t with its output if
// it fails; it returns the output.
func Run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
