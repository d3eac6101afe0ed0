package k8s_test

import (
	"slices"
	"strings"
	"testing"
)

// TestSweeperToExecutorIsMutualTLS: cert-manager issues the executor a
// server certificate and the sweeper a client certificate from the
// namespace's CA; the executor serves mutual TLS admitting only "sweeper",
// the sweeper presents its certificate and checks the executor's name, and
// no other workload mounts the sweeper's identity.
func TestSweeperToExecutorIsMutualTLS(t *testing.T) {
	for _, overlay := range []string{"dev", "prod"} {
		t.Run(overlay, func(t *testing.T) {
			docs := render(t, overlay)
			certs := map[string]obj{}
			for _, c := range byKind(docs, "Certificate") {
				if strings.HasPrefix(str(c, "apiVersion"), "cert-manager.io/") {
					certs[str(c, "metadata", "name")] = c
				}
			}
			exe, swp := certs["executor-tls"], certs["sweeper-tls"]
			if exe == nil || swp == nil {
				t.Fatalf("certificates %v: want executor-tls and sweeper-tls", keys(certs))
			}
			if str(swp, "spec", "commonName") != "sweeper" || !hasString(list(swp, "spec", "usages"), "client auth") {
				t.Error("sweeper-tls is not a client certificate named sweeper")
			}
			if !hasString(list(exe, "spec", "usages"), "server auth") {
				t.Error("executor-tls is not a server certificate")
			}
			for _, c := range []obj{exe, swp} {
				if str(c, "spec", "issuerRef", "name") != "paysched-internal" {
					t.Errorf("%s is not issued by the namespace CA", str(c, "metadata", "name"))
				}
			}
			env := func(deploy string) (map[string]string, map[string]string) {
				d := named(docs, "Deployment", deploy)
				if d == nil {
					t.Fatalf("no Deployment %s", deploy)
				}
				c := list(d, "spec", "template", "spec", "containers")[0]
				vars := map[string]string{}
				for _, e := range list(c, "env") {
					vars[str(e, "name")] = str(e, "value")
				}
				secretAt := map[string]string{} // mount path -> secret
				vols := map[string]string{}
				for _, v := range list(d, "spec", "template", "spec", "volumes") {
					vols[str(v, "name")] = str(v, "secret", "secretName")
				}
				for _, m := range list(c, "volumeMounts") {
					secretAt[str(m, "mountPath")] = vols[str(m, "name")]
				}
				return vars, secretAt
			}
			ev, emounts := env("executor")
			if ev["PAYSCHED_TLS_ALLOWED_CLIENTS"] != "sweeper" {
				t.Errorf("the executor admits %q, want only sweeper", ev["PAYSCHED_TLS_ALLOWED_CLIENTS"])
			}
			for _, k := range []string{"PAYSCHED_TLS_CERT_FILE", "PAYSCHED_TLS_KEY_FILE", "PAYSCHED_TLS_CLIENT_CA_FILE"} {
				if dir := ev[k][:max(0, strings.LastIndex(ev[k], "/"))]; emounts[dir] != "executor-tls" {
					t.Errorf("executor %s=%q is not in the mounted executor-tls secret", k, ev[k])
				}
			}
			sv, smounts := env("sweeper")
			for _, k := range []string{"PAYSCHED_EXECUTOR_CA_FILE", "PAYSCHED_EXECUTOR_CERT_FILE", "PAYSCHED_EXECUTOR_KEY_FILE"} {
				if dir := sv[k][:max(0, strings.LastIndex(sv[k], "/"))]; smounts[dir] != "sweeper-tls" {
					t.Errorf("sweeper %s=%q is not in the mounted sweeper-tls secret", k, sv[k])
				}
			}
			if name := sv["PAYSCHED_EXECUTOR_SERVER_NAME"]; !hasString(list(exe, "spec", "dnsNames"), name) {
				t.Errorf("the sweeper checks the name %q, which executor-tls does not carry", name)
			}
			for _, d := range byKind(docs, "Deployment") {
				if name := str(d, "metadata", "name"); name != "sweeper" {
					for _, v := range list(d, "spec", "template", "spec", "volumes") {
						if str(v, "secret", "secretName") == "sweeper-tls" {
							t.Errorf("%s mounts the sweeper's identity", name)
						}
					}
				}
			}
		})
	}
}

func hasString(l []any, s string) bool {
	return slices.ContainsFunc(l, func(v any) bool { x, _ := v.(string); return x == s })
}

func keys(m map[string]obj) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
