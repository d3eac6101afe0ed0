package k8s_test

import (
	"net"
	"strings"
	"testing"

	"github.com/paysched/paysched/pkg/platform/config"
)

// products are the product workloads (the services' Deployments).
var products = []string{"payments-api", "admin-api", "sweeper", "executor", "reaper", "cdc", "audit-consumer", "webhook-dispatcher",
	"reconciler"}

// containerEnv is a workload's first container's literal env values, the
// names of those that come from a Secret, its pod spec and the container.
func containerEnv(t *testing.T, d obj) (vals map[string]string, fromSecret map[string]bool, podSpec, c any) {
	t.Helper()
	podSpec = get(d, "spec", "template", "spec")
	c = list(podSpec, "containers")[0]
	vals, fromSecret = map[string]string{}, map[string]bool{}
	for _, e := range list(c, "env") {
		vals[str(e, "name")] = str(e, "value")
		if get(e, "valueFrom", "secretKeyRef") != nil {
			fromSecret[str(e, "name")] = true
		}
	}
	return vals, fromSecret, podSpec, c
}

// TestProductionModeInProd: the prod overlay runs every service in
// production mode (no PAYSCHED_DEV) with what production mode demands of
// it, and carries no published development value; the dev overlay runs
// every product workload, the migration included, with --dev.
func TestProductionModeInProd(t *testing.T) {
	t.Run("prod", func(t *testing.T) {
		docs := render(t, "prod")
		for _, d := range docs {
			for _, s := range stringsIn(d) {
				if config.Published(s) {
					t.Errorf("%s %s carries a published development value", d["kind"], str(d, "metadata", "name"))
				}
			}
		}
		for _, name := range products {
			d := named(docs, "Deployment", name)
			if d == nil {
				t.Fatalf("no Deployment %s", name)
			}
			env, fromSecret, _, _ := containerEnv(t, d)
			if _, ok := env["PAYSCHED_DEV"]; ok {
				t.Errorf("%s runs in development mode", name)
			}
			if _, ok := env["PAYSCHED_ALLOW_LOOPBACK"]; ok {
				t.Errorf("%s sets PAYSCHED_ALLOW_LOOPBACK (development only)", name)
			}
			urls := 0
			for k, v := range env {
				if strings.HasSuffix(k, "DATABASE_URL") {
					urls++
					if !strings.Contains(v, "sslmode=verify-full") {
						t.Errorf("%s: %s does not verify the server", name, k)
					}
				}
			}
			if urls == 0 {
				t.Errorf("%s sets no database URL", name)
			}
			// The audit log and the webhooks live on their own cluster, whose
			// WAL cdc's walsender never reads (issue 42).
			for _, k := range []string{"PAYSCHED_AUDIT_DATABASE_URL", "PAYSCHED_WEBHOOKS_DATABASE_URL"} {
				if u, ok := env[k]; ok && (u == env["PAYSCHED_DATABASE_URL"] || strings.Contains(u, "@"+schedulePG+"-rw:")) {
					t.Errorf("%s: %s %q is on the schedule's cluster", name, k, u)
				}
			}
			// What each service's production checks ask for (services/*/main.go).
			var want []string
			secret := map[string]bool{}
			switch name {
			case "payments-api":
				// Schema 24 moved the schedule's webhook tables aside: an empty
				// webhooks URL would find none.
				want = []string{"PAYSCHED_JWT_JWKS_FILE", "PAYSCHED_CURSOR_SECRET", "PAYSCHED_WEBHOOKS_DATABASE_URL"}
				secret["PAYSCHED_CURSOR_SECRET"] = true
				if env["PAYSCHED_JWT_SECRET"] != "" || fromSecret["PAYSCHED_JWT_SECRET"] {
					t.Error("payments-api accepts HS256 in production")
				}
				// The internet's door holds no gateway access.
				for k := range env {
					if strings.HasPrefix(k, "PAYSCHED_GATEWAY_") || strings.HasPrefix(k, "PAYSCHED_STRIPE_") {
						t.Errorf("payments-api has %s: it must hold no gateway access", k)
					}
				}
			case "admin-api":
				want = []string{"PAYSCHED_JWT_JWKS_FILE", "PAYSCHED_GATEWAY_CA_FILE", "PAYSCHED_GATEWAY_CERT_FILE", "PAYSCHED_GATEWAY_KEY_FILE",
					"PAYSCHED_WEBHOOKS_DATABASE_URL", "PAYSCHED_AUDIT_DATABASE_URL"}
				if env["PAYSCHED_JWT_SECRET"] != "" || fromSecret["PAYSCHED_JWT_SECRET"] {
					t.Error("admin-api accepts HS256 in production")
				}
			case "executor":
				want = []string{"PAYSCHED_TLS_CERT_FILE", "PAYSCHED_TLS_KEY_FILE", "PAYSCHED_TLS_CLIENT_CA_FILE", "PAYSCHED_GATEWAY_CA_FILE", "PAYSCHED_GATEWAY_CERT_FILE", "PAYSCHED_GATEWAY_KEY_FILE"}
			case "sweeper":
				want = []string{"PAYSCHED_EXECUTOR_CA_FILE", "PAYSCHED_EXECUTOR_CERT_FILE", "PAYSCHED_EXECUTOR_KEY_FILE"}
			case "reconciler":
				want = []string{"PAYSCHED_WEBHOOK_SECRET", "PAYSCHED_GATEWAY_CA_FILE", "PAYSCHED_GATEWAY_CERT_FILE", "PAYSCHED_GATEWAY_KEY_FILE"}
				secret["PAYSCHED_WEBHOOK_SECRET"] = true
			case "cdc":
				want = []string{"PAYSCHED_KAFKA_CA_FILE", "PAYSCHED_KAFKA_SASL_MECHANISM", "PAYSCHED_KAFKA_USERNAME", "PAYSCHED_KAFKA_PASSWORD_FILE"}
			case "audit-consumer":
				want = []string{"PAYSCHED_KAFKA_CA_FILE", "PAYSCHED_KAFKA_SASL_MECHANISM", "PAYSCHED_KAFKA_USERNAME", "PAYSCHED_KAFKA_PASSWORD_FILE",
					"PAYSCHED_AUDIT_DATABASE_URL"}
				if u := env["PAYSCHED_AUDIT_DATABASE_URL"]; u == env["PAYSCHED_DATABASE_URL"] || !strings.Contains(u, "/paysched_audit?") ||
					!strings.Contains(u, "sslmode=verify-full") {
					t.Errorf("audit-consumer: the audit log's database %q is not its own, or not verified", u)
				}
			case "webhook-dispatcher":
				want = []string{"PAYSCHED_KAFKA_CA_FILE", "PAYSCHED_KAFKA_SASL_MECHANISM", "PAYSCHED_KAFKA_USERNAME", "PAYSCHED_KAFKA_PASSWORD_FILE",
					"PAYSCHED_WEBHOOKS_DATABASE_URL"}
				if _, ok := env["PAYSCHED_DATABASE_URL"]; ok {
					t.Error("webhook-dispatcher is given the schedule's database, which it no longer uses")
				}
			}
			for _, k := range want {
				if secret[k] {
					if !fromSecret[k] {
						t.Errorf("%s: %s does not come from a Secret", name, k)
					}
				} else if env[k] == "" {
					t.Errorf("%s: %s is not set: production mode refuses to start without it", name, k)
				}
			}
		}
	})
	t.Run("dev", func(t *testing.T) {
		docs := render(t, "dev")
		workloads := []obj{named(docs, "Job", "paysched-migrate")}
		for _, name := range products {
			workloads = append(workloads, named(docs, "Deployment", name))
		}
		for _, d := range workloads {
			if d == nil {
				t.Fatal("a product workload is missing")
			}
			env, _, _, _ := containerEnv(t, d)
			if env["PAYSCHED_DEV"] != "true" {
				t.Errorf("%s does not run in development mode, but the dev overlay's secrets are published", str(d, "metadata", "name"))
			}
			// A local receiver is the local stack's (make up), never a pod's.
			if _, ok := env["PAYSCHED_ALLOW_LOOPBACK"]; ok {
				t.Errorf("%s sets PAYSCHED_ALLOW_LOOPBACK: webhooks may reach the pod's own loopback", str(d, "metadata", "name"))
			}
		}
	})
}

// stringsIn lists every string in a decoded document.
func stringsIn(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case obj:
		var out []string
		for _, e := range x {
			out = append(out, stringsIn(e)...)
		}
		return out
	case []any:
		var out []string
		for _, e := range x {
			out = append(out, stringsIn(e)...)
		}
		return out
	}
	return nil
}

// TestGatewayHopIsMutualTLS: every caller of the gateway (the executor,
// the reconciler and admin-api) checks the gateway's certificate
// against the namespace CA and presents a client certificate of its own
// name from it; in dev, gateway-sim serves a certificate for the address
// they dial and requires theirs.
func TestGatewayHopIsMutualTLS(t *testing.T) {
	for _, overlay := range []string{"dev", "prod"} {
		t.Run(overlay, func(t *testing.T) {
			docs := render(t, overlay)
			certs := map[string]obj{} // by secret name
			for _, c := range byKind(docs, "Certificate") {
				certs[str(c, "spec", "secretName")] = c
			}
			for _, name := range []string{"executor", "reconciler", "admin-api"} {
				d := named(docs, "Deployment", name)
				env, _, podSpec, c := containerEnv(t, d)
				var secrets []string
				for _, k := range []string{"PAYSCHED_GATEWAY_CA_FILE", "PAYSCHED_GATEWAY_CERT_FILE", "PAYSCHED_GATEWAY_KEY_FILE"} {
					s := mountedDirSecret(podSpec, c, env[k])
					if s == "" {
						t.Errorf("%s: %s=%q is not a file of a mounted Secret", name, k, env[k])
					}
					secrets = append(secrets, s)
				}
				cert := certs[secrets[1]]
				if cert == nil {
					t.Errorf("%s: its gateway client certificate %q is no cert-manager Certificate", name, secrets[1])
					continue
				}
				if str(cert, "spec", "commonName") != name || !hasString(list(cert, "spec", "usages"), "client auth") ||
					str(cert, "spec", "issuerRef", "name") != "paysched-internal" {
					t.Errorf("%s presents %s: want a client certificate named %s from the namespace CA", name, secrets[1], name)
				}
			}
			if overlay != "dev" {
				return
			}
			gw := named(docs, "Deployment", "gateway-sim")
			env, _, podSpec, c := containerEnv(t, gw)
			for _, k := range []string{"PAYSCHED_TLS_CERT_FILE", "PAYSCHED_TLS_KEY_FILE", "PAYSCHED_TLS_CLIENT_CA_FILE"} {
				if mountedDirSecret(podSpec, c, env[k]) != "gateway-sim-tls" {
					t.Errorf("gateway-sim %s=%q is not in its mounted certificate", k, env[k])
				}
			}
			host, _, err := net.SplitHostPort(configValue(t, docs, "GATEWAY_ADDR"))
			if err != nil {
				t.Fatal(err)
			}
			if cert := certs["gateway-sim-tls"]; cert == nil || !hasString(list(cert, "spec", "dnsNames"), host) ||
				!hasString(list(cert, "spec", "usages"), "server auth") {
				t.Errorf("gateway-sim's certificate does not serve the name the services dial (%s)", host)
			}
		})
	}
}

// mountedDirSecret names the Secret mounted whole at the directory holding
// path (empty when none is).
func mountedDirSecret(podSpec, c any, path string) string {
	i := strings.LastIndex(path, "/")
	if i < 0 {
		return ""
	}
	for _, m := range list(c, "volumeMounts") {
		if strings.TrimSuffix(str(m, "mountPath"), "/") != path[:i] {
			continue
		}
		for _, v := range list(podSpec, "volumes") {
			if str(v, "name") == str(m, "name") {
				return str(v, "secret", "secretName")
			}
		}
	}
	return ""
}
