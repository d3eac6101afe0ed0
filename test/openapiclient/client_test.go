// Package openapiclient tests the public OpenAPI document the way a client
// team uses it: it generates a JavaScript client from the /openapi.json a
// running payments-api serves (swagger-typescript-api, pinned in
// package-lock.json) and drives the API with it (driver.mjs). A document
// that does not say what the server does breaks the generated client here.
package openapiclient_test

import (
	"path/filepath"
	"testing"

	"github.com/paysched/paysched/test/apitest"
	"github.com/paysched/paysched/test/nodetest"
	"github.com/paysched/paysched/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestGeneratedClient(t *testing.T) {
	nodetest.Require(t, "the generated-client test", "node", "npm", "npx")
	base := apitest.Start(t)
	tok := apitest.Token(t, "client-test", "")

	dir := nodetest.Install(t, "package.json", "package-lock.json", "driver.mjs")
	// The generator reads the document from the running server, as a client
	// team would.
	nodetest.Run(t, dir, nil, "npx", "--no-install", "swagger-typescript-api", "generate",
		"--path", base+"/openapi.json", "--output", filepath.Join(dir, "gen"), "--name", "api.js",
		"--js", "--disable-throw-on-error", "--silent")
	out := nodetest.Run(t, dir, []string{"PAYSCHED_BASE=" + base, "PAYSCHED_TOKEN=" + tok, "PAYSCHED_GEN=" + filepath.Join(dir, "gen", "api.js")},
		"node", "driver.mjs")
	t.Logf("driver:\n%s", out)
}
