package k8s_test

import (
	"net"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"testing"
)

// egressWant is where each workload may open connections, by kind of
// destination (see destinations). payments-api, the internet's door,
// reaches the databases and nothing that moves money; the
// webhook-dispatcher alone reaches the tenants' endpoints (443 outside the
// cluster), and no gateway, nor the schedule's Postgres ("postgres"): only
// the events' cluster ("postgres-events", the audit log and the webhooks).
var egressWant = map[string][]string{
	"payments-api":       {"dns", "otel", "postgres", "postgres-events"},
	"admin-api":          {"dns", "gateway", "otel", "postgres", "postgres-events"},
	"sweeper":            {"dns", "executor", "otel", "postgres"},
	"executor":           {"dns", "gateway", "otel", "postgres"},
	"reaper":             {"dns", "otel", "postgres"},
	"cdc":                {"dns", "kafka", "otel", "postgres"},
	"audit-consumer":     {"dns", "kafka", "otel", "postgres", "postgres-events"},
	"webhook-dispatcher": {"dns", "kafka", "otel", "postgres-events", "webhooks"},
	"reconciler":         {"dns", "gateway", "otel", "postgres"},
}

// destinations classifies the egress a pod with labels is allowed:
// "anywhere" for a rule without peers, else one word per peer. A peer
// outside the cluster (an ipBlock) is the gateway's when its policy selects
// the gateway's clients, the webhooks' when it selects the
// webhook-dispatcher, and must be TLS on 443 that excepts the private and
// link-local ranges (outside).
func destinations(t *testing.T, docs []obj, labels any) []string {
	t.Helper()
	set := map[string]bool{}
	for _, np := range byKind(docs, "NetworkPolicy") {
		if !slices.Contains(list(np, "spec", "policyTypes"), any("Egress")) || !selects(get(np, "spec", "podSelector"), labels) {
			continue
		}
		for _, r := range list(np, "spec", "egress") {
			peers := list(r, "to")
			if len(peers) == 0 {
				set["anywhere"] = true
			}
			for _, p := range peers {
				ns := str(p, "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name")
				pods, _ := get(p, "podSelector", "matchLabels").(map[string]any)
				switch {
				case ns == "kube-system" && pods["k8s-app"] == "kube-dns":
					set["dns"] = true
				case ns == "observability":
					set["otel"] = true
				case get(p, "ipBlock") != nil:
					outside(t, np, r, p)
					sel, _ := get(np, "spec", "podSelector", "matchLabels").(map[string]any)
					switch {
					case sel["paysched.io/gateway-client"] == "true":
						set["gateway"] = true
					case sel["app.kubernetes.io/name"] == "webhook-dispatcher":
						set["webhooks"] = true
					default:
						set[str(np, "metadata", "name")+": unclassified peer outside the cluster"] = true
					}
				case pods["cnpg.io/cluster"] == schedulePG:
					set["postgres"] = true
				case pods["cnpg.io/cluster"] == eventsPG:
					set["postgres-events"] = true
				case pods["strimzi.io/cluster"] != nil:
					set["kafka"] = true
				case pods["app.kubernetes.io/name"] == "executor":
					set["executor"] = true
				case pods["app.kubernetes.io/name"] == "gateway-sim":
					set["gateway"] = true
				default:
					set[str(np, "metadata", "name")+": unclassified peer"] = true
				}
			}
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// inside are the ranges an egress rule to the outside must except: the
// private ones the cluster's pods, Services and nodes live in, and the
// link-local ones of the cloud's metadata service.
var inside = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("172.16.0.0/12"), netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("fc00::/7"), netip.MustParsePrefix("fe80::/10"),
}

// outside checks egress rule r's ipBlock peer p of NetworkPolicy np: TLS
// on 443 only, and every inside range its cidr covers excepted.
func outside(t *testing.T, np obj, r, p any) {
	t.Helper()
	name := str(np, "metadata", "name")
	for _, port := range list(r, "ports") {
		if n, _ := num(port, "port"); n != 443 {
			t.Errorf("NetworkPolicy %s opens port %v outside the cluster", name, get(port, "port"))
		}
	}
	if len(list(r, "ports")) == 0 {
		t.Errorf("NetworkPolicy %s opens every port outside the cluster", name)
	}
	cidr, err := netip.ParsePrefix(str(p, "ipBlock", "cidr"))
	if err != nil {
		t.Errorf("NetworkPolicy %s: ipBlock cidr: %v", name, err)
		return
	}
	var except []netip.Prefix
	for _, e := range list(p, "ipBlock", "except") {
		es, _ := e.(string)
		ep, err := netip.ParsePrefix(es)
		if err != nil {
			t.Errorf("NetworkPolicy %s: ipBlock except: %v", name, err)
			continue
		}
		except = append(except, ep)
	}
	for _, in := range inside {
		if !cidr.Overlaps(in) {
			continue
		}
		covered := false
		for _, e := range except {
			covered = covered || e.Bits() <= in.Bits() && e.Contains(in.Addr())
		}
		if !covered {
			t.Errorf("NetworkPolicy %s: ipBlock %s reaches into %s", name, cidr, in)
		}
	}
}

// TestEgressIsDeniedByDefault: egress is denied unless a policy allows it,
// and each service reaches only what its work needs (DNS, the OTel
// collector, Postgres, and its own peers). The point of it: a compromised
// payments-api pod cannot reach the gateway, or anything outside.
func TestEgressIsDeniedByDefault(t *testing.T) {
	for _, overlay := range []string{"dev", "prod"} {
		t.Run(overlay, func(t *testing.T) {
			docs := render(t, overlay)
			deny := false
			for _, np := range byKind(docs, "NetworkPolicy") {
				ps, _ := get(np, "spec", "podSelector").(map[string]any)
				if len(ps) == 0 && slices.Contains(list(np, "spec", "policyTypes"), any("Egress")) && len(list(np, "spec", "egress")) == 0 {
					deny = true
				}
			}
			if !deny {
				t.Fatal("no default-deny egress NetworkPolicy")
			}
			for name, want := range egressWant {
				d := named(docs, "Deployment", name)
				if d == nil {
					t.Fatalf("no Deployment %s", name)
				}
				got := destinations(t, docs, get(d, "spec", "template", "metadata", "labels"))
				if !slices.Equal(got, want) {
					t.Errorf("%s may reach %v, want %v", name, got, want)
				}
			}
			job := named(docs, "Job", "paysched-migrate")
			if got := destinations(t, docs, get(job, "spec", "template", "metadata", "labels")); !slices.Equal(got, []string{"dns", "otel", "postgres", "postgres-events"}) {
				t.Errorf("the migration may reach %v", got)
			}
		})
	}
}

// TestIngressReachesNoInternals: the ports the ingress controller may
// reach carry the API or the webhooks only. /metrics is on each
// service's "metrics" port, which the process listens on apart
// (PAYSCHED_METRICS_ADDR), and no ingress-reachable port is it.
func TestIngressReachesNoInternals(t *testing.T) {
	for _, overlay := range []string{"dev", "prod"} {
		t.Run(overlay, func(t *testing.T) {
			docs := render(t, overlay)
			reached := 0
			for _, d := range byKind(docs, "Deployment") {
				name := str(d, "metadata", "name")
				env, _, _, c := containerEnv(t, d)
				ports := map[string]string{} // name -> containerPort
				for _, p := range list(c, "ports") {
					n, _ := num(p, "containerPort")
					ports[str(p, "name")] = strconv.Itoa(n)
				}
				for _, r := range ingressRules(docs, get(d, "spec", "template", "metadata", "labels")) {
					fromIngress := false
					for _, peer := range list(r, "from") {
						if str(peer, "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name") == "ingress-nginx" {
							fromIngress = true
						}
					}
					if !fromIngress {
						continue
					}
					if len(list(r, "ports")) == 0 {
						t.Errorf("%s: the ingress controller reaches every port", name)
					}
					for _, p := range list(r, "ports") {
						reached++
						pn, _ := get(p, "port").(string)
						if pn == "metrics" {
							t.Errorf("%s: the ingress controller reaches the metrics port", name)
						}
						_, mport, err := net.SplitHostPort(env["PAYSCHED_METRICS_ADDR"])
						if err != nil {
							t.Errorf("%s is reached by the ingress controller but sets no PAYSCHED_METRICS_ADDR: /metrics would share its port", name)
						} else if ports[pn] == mport || ports["metrics"] != mport {
							t.Errorf("%s: PAYSCHED_METRICS_ADDR %s is not the metrics port apart from %s", name, env["PAYSCHED_METRICS_ADDR"], pn)
						}
					}
				}
			}
			if reached == 0 {
				t.Error("the ingress controller reaches nothing")
			}
		})
	}
}

var digestRef = regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)

// TestProdImagesArePinnedByDigest: every image the prod overlay runs,
// ours and Strimzi's, is named by digest: a tag can be moved under a
// running deployment, a digest cannot.
func TestProdImagesArePinnedByDigest(t *testing.T) {
	docs := render(t, "prod")
	var images []string
	for _, kind := range []string{"Deployment", "Job", "StatefulSet", "DaemonSet"} {
		for _, d := range byKind(docs, kind) {
			for _, key := range []string{"initContainers", "containers"} {
				for _, c := range list(d, "spec", "template", "spec", key) {
					images = append(images, str(c, "image"))
				}
			}
		}
	}
	k := named(docs, "Kafka", "paysched")
	if k == nil {
		t.Fatal("no Kafka")
	}
	for _, path := range [][]string{{"spec", "kafka", "image"}, {"spec", "entityOperator", "topicOperator", "image"},
		{"spec", "entityOperator", "userOperator", "image"}, {"spec", "kafkaExporter", "image"}} {
		images = append(images, str(k, path...))
	}
	for _, img := range images {
		if !digestRef.MatchString(img) {
			t.Errorf("image %q is not pinned by digest", img)
		}
	}
}

// TestProdEnforcesRestrictedPodSecurity: the prod namespace enforces the
// restricted Pod Security profile, and every paysched pod meets it.
func TestProdEnforcesRestrictedPodSecurity(t *testing.T) {
	docs := render(t, "prod")
	ns := named(docs, "Namespace", "paysched")
	if got := str(ns, "metadata", "labels", "pod-security.kubernetes.io/enforce"); got != "restricted" {
		t.Fatalf("the prod namespace enforces %q, want restricted", got)
	}
	workloads := append(byKind(docs, "Deployment"), byKind(docs, "Job")...)
	for _, d := range workloads {
		name := str(d, "metadata", "name")
		pod := get(d, "spec", "template", "spec")
		for _, k := range []string{"hostNetwork", "hostPID", "hostIPC"} {
			if get(pod, k) == true {
				t.Errorf("%s: %s", name, k)
			}
		}
		for _, v := range list(pod, "volumes") {
			if get(v, "hostPath") != nil {
				t.Errorf("%s mounts a hostPath", name)
			}
		}
		podNonRoot := get(pod, "securityContext", "runAsNonRoot") == true
		podSeccomp := str(pod, "securityContext", "seccompProfile", "type")
		for _, key := range []string{"initContainers", "containers"} {
			for _, c := range list(pod, key) {
				cn := name + "/" + str(c, "name")
				if get(c, "securityContext", "allowPrivilegeEscalation") != false {
					t.Errorf("%s: allowPrivilegeEscalation is not false", cn)
				}
				if drop := list(c, "securityContext", "capabilities", "drop"); !slices.Contains(drop, any("ALL")) {
					t.Errorf("%s: capabilities are not dropped (ALL)", cn)
				}
				if add := list(c, "securityContext", "capabilities", "add"); len(add) > 0 {
					t.Errorf("%s adds capabilities %v", cn, add)
				}
				if !podNonRoot && get(c, "securityContext", "runAsNonRoot") != true {
					t.Errorf("%s may run as root", cn)
				}
				if s := str(c, "securityContext", "seccompProfile", "type"); s == "" && podSeccomp == "" {
					t.Errorf("%s has no seccomp profile", cn)
				}
				if get(c, "securityContext", "privileged") == true {
					t.Errorf("%s is privileged", cn)
				}
			}
		}
	}
}

// TestIngressesAreRateLimited: every Ingress limits requests per client
// address at the edge, and the webhook Ingress routes Stripe's events to
// the reconciler (which serves them: --stripe-webhook-secret-file).
func TestIngressesAreRateLimited(t *testing.T) {
	for _, overlay := range []string{"dev", "prod"} {
		t.Run(overlay, func(t *testing.T) {
			docs := render(t, overlay)
			for _, ing := range byKind(docs, "Ingress") {
				if str(ing, "metadata", "annotations", "nginx.ingress.kubernetes.io/limit-rps") == "" {
					t.Errorf("Ingress %s has no limit-rps", str(ing, "metadata", "name"))
				}
			}
			hooks := map[string]bool{}
			for _, r := range list(named(docs, "Ingress", "reconciler-webhook"), "spec", "rules") {
				for _, p := range list(r, "http", "paths") {
					if str(p, "pathType") == "Exact" && str(p, "backend", "service", "name") == "reconciler" {
						hooks[str(p, "path")] = true
					}
				}
			}
			if !hooks["/webhooks/gateway"] || !hooks["/webhooks/stripe"] {
				t.Errorf("webhook routes %v, want /webhooks/gateway and /webhooks/stripe", hooks)
			}
		})
	}
	if !flags(t, "reconciler")["stripe-webhook-secret-file"] {
		t.Error("the reconciler has no --stripe-webhook-secret-file: /webhooks/stripe would route nowhere")
	}
}
