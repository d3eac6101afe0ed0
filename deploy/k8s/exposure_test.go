package k8s_test

import (
	"strings"
	"testing"
)

// TestIngressExposesNoAdminRoute: the public Ingress routes the payments
// API's paths and documents only; no rule reaches /v1/admin/* (the admin
// API stays inside the cluster), over REST or gRPC.
func TestIngressExposesNoAdminRoute(t *testing.T) {
	admin := []string{"/v1/admin/dead-letters", "/v1/admin/scheduled-payments/x:redrive", "/v1/admin/openapi.json",
		"/paysched.v1.AdminService/ListDeadLetters"}
	for _, overlay := range []string{"dev", "prod"} {
		t.Run(overlay, func(t *testing.T) {
			docs := render(t, overlay)
			create := false
			for _, ing := range byKind(docs, "Ingress") {
				for _, r := range list(ing, "spec", "rules") {
					for _, p := range list(r, "http", "paths") {
						path, typ := str(p, "path"), str(p, "pathType")
						for _, a := range admin {
							if matches(typ, path, a) {
								t.Errorf("Ingress %s: %s %s reaches %s", str(ing, "metadata", "name"), typ, path, a)
							}
						}
						create = create || matches(typ, path, "/v1/scheduled-payments")
					}
				}
			}
			if !create {
				t.Error("no Ingress rule reaches /v1/scheduled-payments")
			}
		})
	}
}

// matches is Kubernetes' Ingress path matching: Exact, or Prefix by whole
// path elements (ImplementationSpecific is read as Prefix, the wider).
func matches(pathType, path, url string) bool {
	if pathType == "Exact" {
		return path == url
	}
	p := strings.TrimSuffix(path, "/")
	return p == "" || url == p || strings.HasPrefix(url, p+"/")
}

// TestAdminAPIIsApart: admin-api is its own Deployment and Service, no
// Ingress has it as a backend, and no NetworkPolicy lets the ingress
// controller's namespace reach its pods.
func TestAdminAPIIsApart(t *testing.T) {
	for _, overlay := range []string{"dev", "prod"} {
		t.Run(overlay, func(t *testing.T) {
			docs := render(t, overlay)
			if named(docs, "Deployment", "admin-api") == nil || named(docs, "Service", "admin-api") == nil {
				t.Fatal("no admin-api Deployment and Service")
			}
			for _, ing := range byKind(docs, "Ingress") {
				for _, r := range list(ing, "spec", "rules") {
					for _, p := range list(r, "http", "paths") {
						if str(p, "backend", "service", "name") == "admin-api" {
							t.Errorf("Ingress %s routes %s to admin-api", str(ing, "metadata", "name"), str(p, "path"))
						}
					}
				}
			}
			for _, np := range byKind(docs, "NetworkPolicy") {
				sel := get(np, "spec", "podSelector", "matchLabels")
				name, _ := get(sel, "app.kubernetes.io/name").(string)
				if name != "admin-api" && (sel == nil || len(sel.(map[string]any)) > 0) {
					continue // selects other pods (an empty selector selects all)
				}
				for _, in := range list(np, "spec", "ingress") {
					for _, from := range list(in, "from") {
						if str(from, "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name") == "ingress-nginx" {
							t.Errorf("NetworkPolicy %s lets the ingress controller reach admin-api", str(np, "metadata", "name"))
						}
					}
				}
			}
		})
	}
}
