// Package k8s_test checks the Kubernetes manifests, the Prometheus rules and
// the Grafana dashboard: it renders every overlay with `kubectl kustomize`
// and checks what production needs of each object.
package k8s_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/console"
	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/events/kafka/kafkaauth"
	"github.com/paysched/paysched/pkg/events/tenanthook"
	"github.com/paysched/paysched/pkg/gateway"
	"github.com/paysched/paysched/pkg/gateway/dial"
	"github.com/paysched/paysched/pkg/platform/config"
	"github.com/paysched/paysched/pkg/platform/mtls"
)

var update = flag.Bool("update", false, "rewrite base/prometheusrule.yaml from ../prometheus/alerts.yml")

const (
	alertsFile    = "../prometheus/alerts.yml"
	ruleFile      = "base/prometheusrule.yaml"
	dashboardFile = "../grafana/paysched.json"
	servicesDir   = "../../services"
	toolsDir      = "../../tools/cmd"
	pkgDir        = "../../pkg"
)

// service is what the manifests must do for one paysched process.
type service struct {
	name       string
	grpcHealth bool // serves grpc.health.v1: probes must be gRPC, else httpGet /healthz
	hpa        bool
}

var services = []service{
	{name: "payments-api", grpcHealth: true, hpa: true},
	{name: "admin-api", grpcHealth: true},
	{name: "sweeper"},
	// The executor and gateway-sim serve gRPC with mutual TLS only, which
	// kubelet's gRPC probe cannot speak: they are probed on /healthz.
	{name: "executor", hpa: true},
	{name: "reaper"},
	{name: "cdc"},
	{name: "audit-consumer"},
	{name: "webhook-dispatcher"},
	{name: "reconciler"},
	{name: "gateway-sim"},
}

var overlays = []struct {
	name       string
	gatewaySim bool
	// replicas: want[name] is the exact replica count, or for a Deployment
	// an HPA owns, the HPA's minReplicas; atLeast compares with >=.
	replicas map[string]int
	atLeast  bool
}{
	{name: "dev", gatewaySim: true, replicas: map[string]int{
		"payments-api": 1, "admin-api": 1, "sweeper": 1, "executor": 1, "reaper": 1, "cdc": 1,
		"audit-consumer": 1, "webhook-dispatcher": 1, "reconciler": 1, "gateway-sim": 1}},
	{name: "prod", atLeast: true, replicas: map[string]int{
		"payments-api": 2, "admin-api": 1, "sweeper": 2, "executor": 3, "reaper": 1, "cdc": 1,
		"audit-consumer": 1, "webhook-dispatcher": 2, "reconciler": 1}},
	// The Helm chart (deploy/helm/paysched) goes through the same checks:
	// with its prod values, and with its defaults.
	{name: "helm:prod", atLeast: true, replicas: map[string]int{
		"payments-api": 2, "admin-api": 1, "sweeper": 2, "executor": 3, "reaper": 1, "cdc": 1,
		"audit-consumer": 1, "webhook-dispatcher": 2, "reconciler": 1}},
	{name: "helm:default", atLeast: true, replicas: map[string]int{
		"payments-api": 1, "admin-api": 1, "sweeper": 1, "executor": 1, "reaper": 1, "cdc": 1,
		"audit-consumer": 1, "webhook-dispatcher": 1, "reconciler": 1}},
}

type obj = map[string]any

// get walks maps by key and lists by decimal index; nil when absent.
func get(v any, path ...string) any {
	for _, p := range path {
		switch t := v.(type) {
		case map[string]any:
			v = t[p]
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(t) {
				return nil
			}
			v = t[i]
		default:
			return nil
		}
	}
	return v
}

func str(v any, path ...string) string {
	s, _ := get(v, path...).(string)
	return s
}

func list(v any, path ...string) []any {
	l, _ := get(v, path...).([]any)
	return l
}

func num(v any, path ...string) (int, bool) {
	switch n := get(v, path...).(type) {
	case int:
		return n, true
	case float64:
		return int(n), true
	}
	return 0, false
}

func render(t *testing.T, overlay string) []obj {
	t.Helper()
	if values, ok := strings.CutPrefix(overlay, "helm:"); ok {
		return renderChart(t, values)
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on PATH")
	}
	var stderr bytes.Buffer
	cmd := exec.Command(kubectl, "kustomize", filepath.Join("overlays", overlay))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize overlays/%s: %v\n%s", overlay, err, stderr.String())
	}
	return decodeAll(t, out)
}

func decodeAll(t *testing.T, b []byte) []obj {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []obj
	for {
		var d obj
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
}

func byKind(docs []obj, kind string) []obj {
	var out []obj
	for _, d := range docs {
		if d["kind"] == kind {
			out = append(out, d)
		}
	}
	return out
}

func named(docs []obj, kind, name string) obj {
	for _, d := range byKind(docs, kind) {
		if str(d, "metadata", "name") == name {
			return d
		}
	}
	return nil
}

// selects reports whether a matchLabels selector selects labels; an empty
// selector selects everything. matchExpressions are not used here.
func selects(selector any, labels any) bool {
	want, _ := get(selector, "matchLabels").(map[string]any)
	have, _ := labels.(map[string]any)
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// serviceSelects reports whether a Service's selector (a plain label map)
// selects labels; a Service without a selector selects no pods.
func serviceSelects(svc obj, labels any) bool {
	want, _ := get(svc, "spec", "selector").(map[string]any)
	have, _ := labels.(map[string]any)
	if len(want) == 0 {
		return false
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// flags lists the flags services/<name>/main.go defines (svc.Boot adds
// --pprof-addr); nil when the service has no main.go yet.
func flags(t *testing.T, name string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(servicesDir, name, "main.go"))
	if errors.Is(err, fs.ErrNotExist) {
		// Tools (gateway-sim) live apart from the product services.
		b, err = os.ReadFile(filepath.Join(toolsDir, name, "main.go"))
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	// A main with a svc.Command hands its flag set on as cmd.FlagSet.
	b = bytes.ReplaceAll(b, []byte("(cmd.FlagSet"), []byte("(fs"))
	re := regexp.MustCompile(`(?:fs|cmd)\.(?:String|Int|Int64|Uint|Uint64|Float64|Bool|Duration|Func|TextVar|Var|StringVar|IntVar|Int64Var|UintVar|Uint64Var|Float64Var|BoolVar|DurationVar)\((?:&[\w.]+,\s*)?"([a-z0-9.-]+)"`)
	out := map[string]bool{}
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = true
	}
	if bytes.Contains(b, []byte("svc.Boot(")) || bytes.Contains(b, []byte("svc.Main(")) {
		out["pprof-addr"] = true
	}
	if bytes.Contains(b, []byte("config.RegisterMode(fs")) || bytes.Contains(b, []byte("config.RegisterService(fs")) {
		out["dev"] = true
	}
	// svc.NewCommand(svc.Flags{...}) registers --dev, --http-addr and the
	// database flag (DatabaseFlag, database-url when unset); cmd.Main is
	// svc.Main's (--pprof-addr).
	if bytes.Contains(b, []byte("svc.NewCommand(")) {
		out["dev"], out["http-addr"], out["pprof-addr"] = true, true, true
		db := "database-url"
		if m := regexp.MustCompile(`DatabaseFlag:\s*"([a-z0-9-]+)"`).FindSubmatch(b); m != nil {
			db = string(m[1])
		}
		out[db] = true
	}
	// config.RegisterService(fs, "name", ...) registers --dev and --name,
	// the service's database.
	for _, m := range regexp.MustCompile(`config\.RegisterService\(fs,\s*"([a-z0-9-]+)"`).FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = true
	}
	// config.SecretVar(fs, "name", ...) registers --name and --name-file.
	for _, m := range regexp.MustCompile(`config\.SecretVar\(fs,\s*"([a-z0-9-]+)"`).FindAllStringSubmatch(string(b), -1) {
		out[m[1]], out[m[1]+"-file"] = true, true
	}
	if bytes.Contains(b, []byte("dial.Register(fs")) {
		// The gateway flags every gateway client shares.
		gfs := flag.NewFlagSet(name, flag.ContinueOnError)
		dial.Register(gfs, "")
		gfs.VisitAll(func(f *flag.Flag) { out[f.Name] = true })
	}
	for _, admin := range []bool{false, true} {
		if bytes.Contains(b, []byte(fmt.Sprintf("auth.RegisterFlags(fs, %v)", admin))) {
			// The token flags of an API process.
			afs := flag.NewFlagSet(name, flag.ContinueOnError)
			auth.RegisterFlags(afs, admin)
			afs.VisitAll(func(f *flag.Flag) { out[f.Name] = true })
		}
	}
	if bytes.Contains(b, []byte("console.RegisterFlags(fs")) {
		// The operator console's flags (admin-api).
		cfs := flag.NewFlagSet(name, flag.ContinueOnError)
		console.RegisterFlags(cfs)
		cfs.VisitAll(func(f *flag.Flag) { out[f.Name] = true })
	}
	if bytes.Contains(b, []byte("gateway.RegisterBounds(fs")) {
		bfs := flag.NewFlagSet(name, flag.ContinueOnError)
		gateway.RegisterBounds(bfs)
		bfs.VisitAll(func(f *flag.Flag) { out[f.Name] = true })
	}
	if bytes.Contains(b, []byte("mtls.RegisterServer(fs")) {
		// The mutual TLS server flags (the executor).
		mfs := flag.NewFlagSet(name, flag.ContinueOnError)
		mtls.RegisterServer(mfs, "x")
		mfs.VisitAll(func(f *flag.Flag) { out[f.Name] = true })
	}
	if bytes.Contains(b, []byte(`mtls.RegisterClient(fs, "executor")`)) {
		// The mutual TLS client flags towards the executors (the sweeper).
		mfs := flag.NewFlagSet(name, flag.ContinueOnError)
		mtls.RegisterClient(mfs, "executor")
		mfs.VisitAll(func(f *flag.Flag) { out[f.Name] = true })
	}
	if bytes.Contains(b, []byte("kafkaauth.Register(fs")) {
		// The Kafka TLS and SASL flags every Kafka client shares.
		kfs := flag.NewFlagSet(name, flag.ContinueOnError)
		kafkaauth.Register(kfs)
		kfs.VisitAll(func(f *flag.Flag) { out[f.Name] = true })
	}
	if bytes.Contains(b, []byte("kafkaauth.RegisterClient(fs")) {
		// The seed brokers and the security flags of a Kafka client.
		kfs := flag.NewFlagSet(name, flag.ContinueOnError)
		kafkaauth.RegisterClient(kfs)
		kfs.VisitAll(func(f *flag.Flag) { out[f.Name] = true })
	}
	return out
}

// Secrets the manifests expect to exist without rendering them: those
// CloudNativePG creates (the owner's of each cluster) and those prod creates
// out of band.
var externalSecrets = map[string][]string{
	"paysched-pg-app":        {"uri", "username", "password", "host", "port", "dbname"},
	"paysched-pg-events-app": {"uri", "username", "password", "host", "port", "dbname"},
	"paysched-pg-api":        {"username", "password"},
	"paysched-pg-admin":      {"username", "password"},
	"paysched-pg-sweeper":    {"username", "password"},
	"paysched-pg-executor":   {"username", "password"},
	"paysched-pg-reaper":     {"username", "password"},
	"paysched-pg-reconciler": {"username", "password"},
	"paysched-pg-audit":      {"username", "password"},
	"paysched-pg-cdc":        {"username", "password"},
	"paysched-pg-webhooks":   {"username", "password"},
	"paysched-secrets":       {"cursor-secret", "webhook-secret"},
}

func TestOverlays(t *testing.T) {
	for _, ov := range overlays {
		t.Run(ov.name, func(t *testing.T) {
			docs := render(t, ov.name)
			want := map[string]bool{}
			for _, s := range services {
				if s.name != "gateway-sim" || ov.gatewaySim {
					want[s.name] = true
				}
			}
			var got []string
			for _, d := range byKind(docs, "Deployment") {
				got = append(got, str(d, "metadata", "name"))
			}
			var wantNames []string
			for n := range want {
				wantNames = append(wantNames, n)
			}
			sort.Strings(got)
			sort.Strings(wantNames)
			if !slices.Equal(got, wantNames) {
				t.Fatalf("Deployments = %v, want %v", got, wantNames)
			}
			for _, s := range services {
				if !want[s.name] {
					continue
				}
				t.Run(s.name, func(t *testing.T) { checkDeployment(t, docs, s, ov.replicas[s.name], ov.atLeast) })
			}
			t.Run("executor-headless", func(t *testing.T) { checkExecutorService(t, docs) })
			t.Run("migrate-job", func(t *testing.T) { checkMigrateJob(t, docs) })
			t.Run("postgres", func(t *testing.T) { checkPostgres(t, docs) })
			t.Run("kafka", func(t *testing.T) { checkKafka(t, docs) })
			t.Run("kafka-clients", func(t *testing.T) { checkKafkaClients(t, docs) })
			t.Run("network-policies", func(t *testing.T) { checkNetworkPolicies(t, docs) })
			t.Run("exposure", func(t *testing.T) { checkExposure(t, docs) })
			t.Run("monitoring", func(t *testing.T) { checkMonitoring(t, docs) })
			t.Run("gateway", func(t *testing.T) {
				addr := configValue(t, docs, "GATEWAY_ADDR")
				if sim := strings.HasPrefix(addr, "gateway-sim:"); sim != ov.gatewaySim {
					t.Errorf("GATEWAY_ADDR = %q: gateway-sim is deployed: %v", addr, ov.gatewaySim)
				}
			})
		})
	}
}

func checkDeployment(t *testing.T, docs []obj, s service, wantReplicas int, atLeast bool) {
	d := named(docs, "Deployment", s.name)
	podSpec := get(d, "spec", "template", "spec")
	podLabels := get(d, "spec", "template", "metadata", "labels")
	if !selects(get(d, "spec", "selector"), podLabels) {
		t.Errorf("selector %v does not select the pod labels %v", get(d, "spec", "selector"), podLabels)
	}
	containers := list(podSpec, "containers")
	if len(containers) == 0 {
		t.Fatal("no containers")
	}
	podSec := get(podSpec, "securityContext")
	flagSet := flags(t, s.name)
	if flagSet == nil {
		t.Logf("services/%s/main.go not found: environment names not checked", s.name)
	}
	for _, c := range containers {
		cname := str(c, "name")
		if cmd := list(c, "command"); len(cmd) == 0 || cmd[0] != "/usr/local/bin/"+s.name {
			t.Errorf("%s: command %v, want /usr/local/bin/%s (the image holds every binary there)", cname, cmd, s.name)
		}
		ports := map[string]int{}
		portNums := map[int]bool{}
		for _, p := range list(c, "ports") {
			n, _ := num(p, "containerPort")
			ports[str(p, "name")] = n
			portNums[n] = true
		}
		mutualTLS := false
		for _, e := range list(c, "env") {
			mutualTLS = mutualTLS || str(e, "name") == "PAYSCHED_TLS_CERT_FILE"
		}
		for _, probe := range []string{"livenessProbe", "readinessProbe"} {
			p := get(c, probe)
			if p == nil {
				t.Errorf("%s: no %s", cname, probe)
				continue
			}
			if mutualTLS && get(p, "grpc") != nil {
				t.Errorf("%s: %s is a gRPC probe, but the gRPC port takes only mutual TLS, which kubelet's probe cannot speak", cname, probe)
			}
			if s.grpcHealth {
				port, ok := num(p, "grpc", "port")
				if !ok || !portNums[port] {
					t.Errorf("%s: %s must be a grpc probe on a container port, got %v", cname, probe, p)
				}
			} else {
				port := get(p, "httpGet", "port")
				_, named := ports[str(p, "httpGet", "port")]
				n, isNum := port.(int)
				if str(p, "httpGet", "path") != "/healthz" || !(named || isNum && portNums[n]) {
					t.Errorf("%s: %s must be httpGet /healthz on a container port, got %v", cname, probe, p)
				}
			}
		}
		for _, kind := range []string{"requests", "limits"} {
			for _, r := range []string{"cpu", "memory"} {
				if get(c, "resources", kind, r) == nil {
					t.Errorf("%s: resources.%s.%s missing", cname, kind, r)
				}
			}
		}
		// The container's securityContext wins over the pod's.
		sec := func(path ...string) any {
			if v := get(c, append([]string{"securityContext"}, path...)...); v != nil {
				return v
			}
			return get(podSec, path...)
		}
		if sec("runAsNonRoot") != true {
			t.Errorf("%s: runAsNonRoot is not true", cname)
		}
		if uid, _ := sec("runAsUser").(int); uid != 65532 {
			t.Errorf("%s: runAsUser = %v, want 65532", cname, sec("runAsUser"))
		}
		if get(c, "securityContext", "readOnlyRootFilesystem") != true {
			t.Errorf("%s: readOnlyRootFilesystem is not true", cname)
		}
		if get(c, "securityContext", "allowPrivilegeEscalation") != false {
			t.Errorf("%s: allowPrivilegeEscalation is not false", cname)
		}
		if !slices.Contains(list(c, "securityContext", "capabilities", "drop"), any("ALL")) {
			t.Errorf("%s: capabilities do not drop ALL", cname)
		}
		if sec("seccompProfile", "type") != "RuntimeDefault" {
			t.Errorf("%s: seccompProfile is not RuntimeDefault", cname)
		}
		for _, e := range list(c, "env") {
			checkEnv(t, docs, s.name, cname, e, flagSet, portNums)
		}
		checkDatabase(t, s.name, podSpec, c)
	}

	var pdb obj
	for _, p := range byKind(docs, "PodDisruptionBudget") {
		if selects(get(p, "spec", "selector"), podLabels) {
			pdb = p
		}
	}
	if pdb == nil {
		t.Error("no PodDisruptionBudget selects its pods")
	}

	var hpa obj
	for _, h := range byKind(docs, "HorizontalPodAutoscaler") {
		if str(h, "spec", "scaleTargetRef", "kind") == "Deployment" && str(h, "spec", "scaleTargetRef", "name") == s.name {
			hpa = h
		}
	}
	replicas, hasReplicas := num(d, "spec", "replicas")
	switch {
	case s.hpa && hpa == nil:
		t.Error("no HorizontalPodAutoscaler")
	case !s.hpa && hpa != nil:
		t.Error("unexpected HorizontalPodAutoscaler")
	case hpa != nil:
		if hasReplicas {
			t.Error("spec.replicas is set although an HPA owns the replica count")
		}
		replicas, hasReplicas = num(hpa, "spec", "minReplicas")
		if maxR, _ := num(hpa, "spec", "maxReplicas"); maxR < replicas {
			t.Errorf("HPA maxReplicas %d < minReplicas %d", maxR, replicas)
		}
	}
	if !hasReplicas {
		replicas = 1
	}
	if atLeast && replicas < wantReplicas || !atLeast && replicas != wantReplicas {
		t.Errorf("replicas = %d, want %s%d", replicas, map[bool]string{true: ">= "}[atLeast], wantReplicas)
	}
}

// checkEnv checks one environment variable: PAYSCHED_* names a real flag,
// *_ADDR listens on all interfaces on a declared port, references resolve.
func checkEnv(t *testing.T, docs []obj, svc, cname string, e any, flagSet map[string]bool, ports map[int]bool) {
	name := str(e, "name")
	if strings.HasPrefix(name, "PAYSCHED_") && flagSet != nil {
		found := false
		for f := range flagSet {
			if config.EnvName(f) == name {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: %s is no flag of services/%s", cname, name, svc)
		}
	}
	if (name == "PAYSCHED_HTTP_ADDR" || name == "PAYSCHED_GRPC_ADDR") && svc != "" {
		host, port, err := net.SplitHostPort(str(e, "value"))
		n, _ := strconv.Atoi(port)
		if err != nil || host != "0.0.0.0" || !ports[n] {
			t.Errorf("%s: %s = %q must listen on 0.0.0.0 and a declared container port", cname, name, str(e, "value"))
		}
	}
	if ref := get(e, "valueFrom", "configMapKeyRef"); ref != nil {
		cm := named(docs, "ConfigMap", str(ref, "name"))
		if cm == nil || get(cm, "data", str(ref, "key")) == nil {
			t.Errorf("%s: %s refers to ConfigMap %s key %s, which is not rendered", cname, name, str(ref, "name"), str(ref, "key"))
		}
	}
	if ref := get(e, "valueFrom", "secretKeyRef"); ref != nil {
		sname, key := str(ref, "name"), str(ref, "key")
		if sec := named(docs, "Secret", sname); sec != nil {
			if get(sec, "data", key) == nil && get(sec, "stringData", key) == nil {
				t.Errorf("%s: %s refers to Secret %s key %s, which it lacks", cname, name, sname, key)
			}
		} else if !slices.Contains(externalSecrets[sname], key) {
			t.Errorf("%s: %s refers to Secret %s key %s, neither rendered nor a documented external secret", cname, name, sname, key)
		}
	}
}

func configValue(t *testing.T, docs []obj, key string) string {
	t.Helper()
	for _, cm := range byKind(docs, "ConfigMap") {
		if strings.HasPrefix(str(cm, "metadata", "name"), "paysched-config") {
			return str(cm, "data", key)
		}
	}
	t.Fatal("no paysched-config ConfigMap")
	return ""
}

func checkExecutorService(t *testing.T, docs []obj) {
	ex := named(docs, "Deployment", "executor")
	var headless obj
	for _, s := range byKind(docs, "Service") {
		if serviceSelects(s, get(ex, "spec", "template", "metadata", "labels")) {
			if str(s, "spec", "clusterIP") != "None" {
				t.Errorf("Service %s selects the executors but is not headless", str(s, "metadata", "name"))
				continue
			}
			headless = s
		}
	}
	if headless == nil {
		t.Fatal("no headless Service for the executors")
	}
	// The sweepers dial the headless name on the executors' gRPC port.
	want := str(headless, "metadata", "name") + ":"
	var grpcPort int
	for _, p := range list(ex, "spec", "template", "spec", "containers", "0", "ports") {
		if str(p, "name") == "grpc" {
			grpcPort, _ = num(p, "containerPort")
		}
	}
	if got := configValue(t, docs, "EXECUTORS"); got != want+strconv.Itoa(grpcPort) {
		t.Errorf("EXECUTORS = %q, want %s%d", got, want, grpcPort)
	}
	for _, e := range list(named(docs, "Deployment", "sweeper"), "spec", "template", "spec", "containers", "0", "env") {
		if str(e, "name") == "PAYSCHED_EXECUTORS" && str(e, "valueFrom", "configMapKeyRef", "key") == "EXECUTORS" {
			return
		}
	}
	t.Error("the sweeper does not take PAYSCHED_EXECUTORS from the ConfigMap's EXECUTORS")
}

func checkMigrateJob(t *testing.T, docs []obj) {
	for _, j := range byKind(docs, "Job") {
		for _, c := range list(j, "spec", "template", "spec", "containers") {
			if cmd := list(c, "command"); len(cmd) > 0 && cmd[0] == "/usr/local/bin/migrate" {
				if get(c, "securityContext", "readOnlyRootFilesystem") != true || get(j, "spec", "template", "spec", "securityContext", "runAsNonRoot") != true {
					t.Error("the migrate Job is not non-root with a read-only root")
				}
				for _, e := range list(c, "env") {
					checkEnv(t, docs, "migrate", "migrate", e, flags(t, "migrate"), nil)
				}
				checkDatabase(t, "migrate", get(j, "spec", "template", "spec"), c)
				return
			}
		}
	}
	t.Error("no Job runs /usr/local/bin/migrate")
}

// The CloudNativePG clusters: the schedule's, which cdc streams from, and
// the events' (the audit log and the webhooks), apart so that their writes
// never pass through cdc's walsender, which reads every WAL record of its
// cluster (issue 42).
const (
	schedulePG = "paysched-pg"
	eventsPG   = "paysched-pg-events"
)

// dbTarget is where a database URL must point: a cluster (its primary's
// Service <cluster>-rw, its CA <cluster>-ca) and a database on it.
type dbTarget struct{ cluster, database string }

var (
	scheduleDB = dbTarget{schedulePG, "paysched"}
	auditDB    = dbTarget{eventsPG, "paysched_audit"}
	webhooksDB = dbTarget{eventsPG, "paysched_webhooks"}
)

// dbURLs is every database URL each workload sets and where it must point:
// exactly these (another *DATABASE_URL fails, and so does a missing one).
// TestDatabaseURLsAreTheFlags keeps it to the processes' flags.
var dbURLs = map[string]map[string]dbTarget{
	"payments-api":       {"PAYSCHED_DATABASE_URL": scheduleDB, "PAYSCHED_WEBHOOKS_DATABASE_URL": webhooksDB},
	"admin-api":          {"PAYSCHED_DATABASE_URL": scheduleDB, "PAYSCHED_AUDIT_DATABASE_URL": auditDB, "PAYSCHED_WEBHOOKS_DATABASE_URL": webhooksDB},
	"sweeper":            {"PAYSCHED_DATABASE_URL": scheduleDB},
	"executor":           {"PAYSCHED_DATABASE_URL": scheduleDB},
	"reaper":             {"PAYSCHED_DATABASE_URL": scheduleDB},
	"reconciler":         {"PAYSCHED_DATABASE_URL": scheduleDB},
	"cdc":                {"PAYSCHED_DATABASE_URL": scheduleDB},
	"audit-consumer":     {"PAYSCHED_DATABASE_URL": scheduleDB, "PAYSCHED_AUDIT_DATABASE_URL": auditDB},
	"webhook-dispatcher": {"PAYSCHED_WEBHOOKS_DATABASE_URL": webhooksDB},
	"migrate":            {"PAYSCHED_DATABASE_URL": scheduleDB, "PAYSCHED_AUDIT_DATABASE_URL": auditDB, "PAYSCHED_WEBHOOKS_DATABASE_URL": webhooksDB},
}

// otherDBClients are workloads outside dbURLs that reach a cluster:
// gateway-sim (dev only) keeps its own database, paysched_gateway, on the
// schedule's cluster as its owner.
var otherDBClients = map[string]string{"gateway-sim": schedulePG}

// usesCluster reports whether workload name connects to cluster.
func usesCluster(name, cluster string) bool {
	for _, target := range dbURLs[name] {
		if target.cluster == cluster {
			return true
		}
	}
	return otherDBClients[name] == cluster
}

// TestDatabaseURLsAreTheFlags: every database URL flag a process has is in
// dbURLs, and every URL there is a flag, so a process that gains a
// database gains its place in the manifests' checks.
func TestDatabaseURLsAreTheFlags(t *testing.T) {
	for svc, urls := range dbURLs {
		fl := flags(t, svc)
		if fl == nil {
			t.Errorf("%s: no services/%s/main.go", svc, svc)
			continue
		}
		for f := range fl {
			if strings.HasSuffix(f, "database-url") {
				if _, ok := urls[config.EnvName(f)]; !ok {
					t.Errorf("%s has --%s, which dbURLs does not place", svc, f)
				}
			}
		}
		for env := range urls {
			found := false
			for f := range fl {
				found = found || config.EnvName(f) == env
			}
			if !found {
				t.Errorf("dbURLs gives %s %s, which is no flag of it", svc, env)
			}
		}
	}
}

// pgClusters are the rendered CloudNativePG Clusters by name.
func pgClusters(docs []obj) map[string]obj {
	out := map[string]obj{}
	for _, c := range byKind(docs, "Cluster") {
		if strings.HasPrefix(str(c, "apiVersion"), "postgresql.cnpg.io/") {
			out[str(c, "metadata", "name")] = c
		}
	}
	return out
}

func checkPostgres(t *testing.T, docs []obj) {
	clusters := pgClusters(docs)
	if got := slices.Sorted(maps.Keys(clusters)); !slices.Equal(got, []string{schedulePG, eventsPG}) {
		t.Fatalf("CloudNativePG Clusters %v, want %s and %s", got, schedulePG, eventsPG)
	}
	// Which databases exist on which cluster: the initdb one, and each
	// Database object's (owned by the cluster's owner). The migrate Job runs
	// with --create-database off, so every database a URL names must be one.
	databases := map[dbTarget]bool{}
	for name, c := range clusters {
		databases[dbTarget{name, str(c, "spec", "bootstrap", "initdb", "database")}] = true
	}
	for _, d := range byKind(docs, "Database") {
		cluster, name := str(d, "spec", "cluster", "name"), str(d, "spec", "name")
		c := clusters[cluster]
		if c == nil {
			t.Errorf("Database %s is on %q, no rendered Cluster", str(d, "metadata", "name"), cluster)
			continue
		}
		if owner := str(c, "spec", "bootstrap", "initdb", "owner"); str(d, "spec", "owner") != owner {
			t.Errorf("Database %s is owned by %q, want the cluster's owner %s (the migrate Job's login)", str(d, "metadata", "name"), str(d, "spec", "owner"), owner)
		}
		databases[dbTarget{cluster, name}] = true
	}
	for svc, urls := range dbURLs {
		for env, target := range urls {
			if !databases[target] {
				t.Errorf("%s's %s names %s on %s, which neither initdb nor a Database object makes", svc, env, target.database, target.cluster)
			}
		}
	}

	for name, c := range clusters {
		if image := str(c, "spec", "imageName"); !digestRef.MatchString(image) {
			t.Errorf("%s: imageName %s is not pinned by digest", name, image)
		}
		walLevel := str(c, "spec", "postgresql", "parameters", "wal_level")
		switch name {
		case schedulePG:
			if walLevel != "logical" {
				t.Errorf("%s: wal_level = %q, want logical (cdc reads a pgoutput slot)", name, walLevel)
			}
		case eventsPG:
			// Nothing decodes it; CloudNativePG's default would be logical.
			if walLevel != "replica" {
				t.Errorf("%s: wal_level = %q, want replica (no logical decoding here)", name, walLevel)
			}
			if get(c, "spec", "replicationSlots", "highAvailability", "synchronizeLogicalDecoding") == true ||
				str(c, "spec", "postgresql", "parameters", "sync_replication_slots") == "on" {
				t.Errorf("%s synchronizes logical slots, but holds none", name)
			}
		}
		roles := map[string]any{}
		for _, r := range list(c, "spec", "managed", "roles") {
			if str(r, "ensure") != "absent" {
				roles[str(r, "name")] = r
			}
		}
		// The owner: CloudNativePG gives its login to <cluster>-app, which
		// the migrate Job reads (checkDatabase).
		owner := str(c, "spec", "bootstrap", "initdb", "owner")
		if owner == "" || get(roles[owner], "login") != true {
			t.Errorf("%s: the owner %q is not a managed LOGIN role", name, owner)
		}
		if get(roles[owner], "replication") == true {
			t.Errorf("%s: the schema owner %s has REPLICATION: only cdc's user may", name, owner)
		}
		// Each service that uses the cluster logs in as its own user, in its
		// group; no other user may log in.
		logins := map[string]bool{owner: true}
		for svc, group := range dbGroups {
			if !usesCluster(svc, name) {
				continue
			}
			login := "svc_" + strings.TrimPrefix(group, "paysched_")
			logins[login] = true
			g, u := roles[group], roles[login]
			if g == nil || get(g, "login") != false {
				t.Errorf("%s on %s: group role %s is not a managed NOLOGIN role", svc, name, group)
			}
			if u == nil || get(u, "login") != true || !slices.Contains(list(u, "inRoles"), any(group)) {
				t.Errorf("%s on %s: no managed LOGIN role %s in %s", svc, name, login, group)
				continue
			}
			if got, want := str(u, "passwordSecret", "name"), dbSecret(svc, name); got != want {
				t.Errorf("%s on %s: role %s's password is Secret %q, the service reads %q", svc, name, login, got, want)
			}
			if rep := get(u, "replication") == true; rep != (svc == "cdc") {
				t.Errorf("%s on %s: role %s replication = %v, want %v (only cdc streams)", svc, name, login, rep, svc == "cdc")
			}
		}
		for rn, r := range roles {
			if get(r, "login") == true && !logins[rn] {
				t.Errorf("%s: LOGIN role %s belongs to no process that uses this cluster", name, rn)
			}
		}
	}
}

// dbGroups is each service's group role (pkg/store/schema/sql/0010_roles.sql;
// the same names on the events' cluster: auditsql/, webhooksql/).
var dbGroups = map[string]string{
	"payments-api": "paysched_api", "admin-api": "paysched_admin", "sweeper": "paysched_sweeper", "executor": "paysched_executor",
	"reaper": "paysched_reaper", "reconciler": "paysched_reconciler", "audit-consumer": "paysched_audit",
	"cdc": "paysched_cdc", "webhook-dispatcher": "paysched_webhooks",
}

// dbSecret is the Secret of the database user svc logs in as on cluster:
// its own, the same on every cluster (one password per service), or for
// the migrations the cluster owner's, which CloudNativePG puts in
// <cluster>-app.
func dbSecret(svc, cluster string) string {
	if svc == "migrate" {
		return cluster + "-app"
	}
	return "paysched-pg-" + strings.TrimPrefix(dbGroups[svc], "paysched_")
}

// checkDatabase checks that container c of svc sets exactly its database
// URLs (dbURLs), each on its cluster's primary and database, as the user
// of the Secret it must use there (defined before the URL, or Kubernetes
// leaves $(VAR) unexpanded), verifying the server against that cluster's
// CA (verify-full).
func checkDatabase(t *testing.T, svc string, podSpec, c any) {
	urls, ok := dbURLs[svc]
	if !ok {
		return // gateway-sim: its own database
	}
	env := map[string]any{}
	at := map[string]int{}
	for i, e := range list(c, "env") {
		env[str(e, "name")] = e
		at[str(e, "name")] = i
	}
	for name := range env {
		if _, ok := urls[name]; strings.HasSuffix(name, "DATABASE_URL") && !ok {
			t.Errorf("%s: sets %s, a database it has no business with (dbURLs)", svc, name)
		}
	}
	for name, want := range urls {
		raw := str(env[name], "value")
		if raw == "" {
			t.Errorf("%s: %s is not set: want %s on %s", svc, name, want.database, want.cluster)
			continue
		}
		u, err := url.Parse(raw)
		if err != nil {
			t.Errorf("%s: %s = %q: %v", svc, name, raw, err)
			continue
		}
		pass, _ := u.User.Password()
		secret := dbSecret(svc, want.cluster)
		for _, ref := range []struct{ placeholder, key string }{{u.User.Username(), "username"}, {pass, "password"}} {
			v, ok := strings.CutPrefix(ref.placeholder, "$(")
			v, ok2 := strings.CutSuffix(v, ")")
			e := env[v]
			if !ok || !ok2 || str(e, "valueFrom", "secretKeyRef", "name") != secret || str(e, "valueFrom", "secretKeyRef", "key") != ref.key {
				t.Errorf("%s: %s's %s %q must be $(VAR) of a variable from Secret %s, key %s", svc, name, ref.key, ref.placeholder, secret, ref.key)
			} else if at[v] > at[name] {
				t.Errorf("%s: %s is defined after %s, which then keeps $(%s) unexpanded", svc, v, name, v)
			}
		}
		if u.Host != want.cluster+"-rw:5432" || u.Path != "/"+want.database {
			t.Errorf("%s: %s = %q, want postgres://...@%s-rw:5432/%s", svc, name, raw, want.cluster, want.database)
		}
		q := u.Query()
		if q.Get("sslmode") != "verify-full" {
			t.Errorf("%s: %s sslmode = %q, want verify-full", svc, name, q.Get("sslmode"))
		}
		if sec, key := mountedSecret(podSpec, c, q.Get("sslrootcert")); sec != want.cluster+"-ca" || key != "ca.crt" {
			t.Errorf("%s: %s sslrootcert %q is not %s's CA (Secret %s-ca, key ca.crt) mounted as a file", svc, name, q.Get("sslrootcert"), want.cluster, want.cluster)
		}
	}
}

func checkKafka(t *testing.T, docs []obj) {
	var clusters []string
	for _, k := range byKind(docs, "Kafka") {
		clusters = append(clusters, str(k, "metadata", "name"))
		// Strimzi 1.0 serves only v1; 0.49 serves both.
		if str(k, "apiVersion") != "kafka.strimzi.io/v1" {
			t.Errorf("Kafka %s is %s, want kafka.strimzi.io/v1", str(k, "metadata", "name"), str(k, "apiVersion"))
		}
		if str(k, "spec", "kafka", "config", "auto.create.topics.enable") != "" && get(k, "spec", "kafka", "config", "auto.create.topics.enable") != false {
			t.Errorf("Kafka %s auto-creates topics", str(k, "metadata", "name"))
		}
	}
	if len(clusters) != 1 {
		t.Fatalf("Kafka clusters %v, want one", clusters)
	}
	pools := 0
	for _, p := range byKind(docs, "KafkaNodePool") {
		if str(p, "metadata", "labels", "strimzi.io/cluster") == clusters[0] {
			pools++
		}
	}
	if pools == 0 {
		t.Error("no KafkaNodePool for the cluster")
	}
	if got := configValue(t, docs, "KAFKA_BROKERS"); got != clusters[0]+"-kafka-bootstrap:9093" {
		t.Errorf("KAFKA_BROKERS = %q, want %s-kafka-bootstrap:9093 (the TLS and SCRAM listener)", got, clusters[0])
	}
	k := named(docs, "Kafka", clusters[0])
	// Every listener authenticates its clients over TLS: the KafkaUsers'
	// ACLs would mean nothing next to an open one.
	listeners := list(k, "spec", "kafka", "listeners")
	if len(listeners) == 0 {
		t.Error("the Kafka cluster has no listener")
	}
	for _, l := range listeners {
		n, _ := num(l, "port")
		if n != 9093 || get(l, "tls") != true || str(l, "authentication", "type") != "scram-sha-512" {
			t.Errorf("listener %s: port %d, tls %v, authentication %q; want 9093, TLS and scram-sha-512",
				str(l, "name"), n, get(l, "tls"), str(l, "authentication", "type"))
		}
	}
	if str(k, "spec", "kafka", "authorization", "type") != "simple" {
		t.Error("the Kafka cluster does not enforce ACLs (spec.kafka.authorization.type simple)")
	}
	if su := get(k, "spec", "kafka", "authorization", "superUsers"); su != nil {
		t.Errorf("the Kafka cluster has superUsers %v, who bypass every ACL", su)
	}
	if get(k, "spec", "entityOperator", "userOperator") == nil {
		t.Error("no User Operator: the KafkaUsers would get no credentials")
	}
	topics := map[string]int{}
	for _, k := range byKind(docs, "KafkaTopic") {
		n, _ := num(k, "spec", "partitions")
		topics[str(k, "spec", "topicName")] = n
		if str(k, "metadata", "labels", "strimzi.io/cluster") != clusters[0] {
			t.Errorf("KafkaTopic %s does not name the cluster", str(k, "metadata", "name"))
		}
	}
	for topic, n := range kafka.DefaultTopics.Partitions() {
		if got, ok := topics[topic]; !ok {
			t.Errorf("no KafkaTopic for %s", topic)
		} else if got != int(n) {
			t.Errorf("KafkaTopic %s has %d partitions, pkg/events/kafka says %d", topic, got, n)
		}
	}
}

// kafkaClients are the Deployments that use Kafka, the consumer group each
// joins (its --group default; none for cdc) and the ACLs each one's
// KafkaUser must grant: exactly these, so that widening a KafkaUser (or
// adding a client without one) fails here.
var kafkaClients = map[string]struct {
	group  string
	access []kafka.Grant
}{
	"cdc":                {"", kafka.CDCAccess(kafka.DefaultTopics)},
	"audit-consumer":     {kafka.AuditGroup, kafka.AuditAccess(kafka.DefaultTopics, kafka.AuditGroup)},
	"webhook-dispatcher": {tenanthook.Group, kafka.WebhookAccess(kafka.DefaultTopics, tenanthook.Group)},
}

// checkKafkaClients: each Kafka client authenticates as its own KafkaUser,
// which grants exactly what the client needs, with the password and the
// cluster CA mounted from Strimzi's Secrets.
func checkKafkaClients(t *testing.T, docs []obj) {
	clusters := byKind(docs, "Kafka")
	if len(clusters) != 1 {
		t.Fatalf("%d Kafka clusters, want one", len(clusters))
	}
	cluster := str(clusters[0], "metadata", "name")
	users := map[string]bool{}
	for _, d := range byKind(docs, "Deployment") {
		name := str(d, "metadata", "name")
		_, client := kafkaClients[name]
		if labeled := str(d, "spec", "template", "metadata", "labels", "paysched.io/kafka-client") == "true"; labeled != client {
			t.Errorf("%s: labeled a Kafka client: %v; has a KafkaUser here: %v", name, labeled, client)
		}
	}
	for name, client := range kafkaClients {
		want := client.access
		d := named(docs, "Deployment", name)
		if d == nil {
			t.Errorf("no Deployment %s", name)
			continue
		}
		podSpec := get(d, "spec", "template", "spec")
		c := get(podSpec, "containers", "0")
		env := map[string]string{}
		for _, e := range list(c, "env") {
			env[str(e, "name")] = str(e, "value")
		}
		if got := env["PAYSCHED_KAFKA_SASL_MECHANISM"]; got != kafkaauth.ScramSHA512 {
			t.Errorf("%s: PAYSCHED_KAFKA_SASL_MECHANISM = %q, want %s", name, got, kafkaauth.ScramSHA512)
		}
		if g, ok := env["PAYSCHED_GROUP"]; ok && g != client.group {
			t.Errorf("%s: PAYSCHED_GROUP = %q, but the KafkaUser grants the group %q", name, g, client.group)
		}
		if p, ok := env["PAYSCHED_TOPIC_PREFIX"]; ok && p != kafka.DefaultPrefix {
			t.Errorf("%s: PAYSCHED_TOPIC_PREFIX = %q, but the topics and ACLs are %s's", name, p, kafka.DefaultPrefix)
		}
		user := env["PAYSCHED_KAFKA_USERNAME"]
		users[user] = true
		if sec, key := mountedSecret(podSpec, c, env["PAYSCHED_KAFKA_PASSWORD_FILE"]); sec != user || key != "password" {
			t.Errorf("%s: PAYSCHED_KAFKA_PASSWORD_FILE %q is Secret %q key %q, want the KafkaUser's Secret %q key password",
				name, env["PAYSCHED_KAFKA_PASSWORD_FILE"], sec, key, user)
		}
		if sec, key := mountedSecret(podSpec, c, env["PAYSCHED_KAFKA_CA_FILE"]); sec != cluster+"-cluster-ca-cert" || key != "ca.crt" {
			t.Errorf("%s: PAYSCHED_KAFKA_CA_FILE %q is Secret %q key %q, want %s-cluster-ca-cert key ca.crt",
				name, env["PAYSCHED_KAFKA_CA_FILE"], sec, key, cluster)
		}
		u := named(docs, "KafkaUser", user)
		if u == nil {
			t.Errorf("%s: PAYSCHED_KAFKA_USERNAME %q is no KafkaUser", name, user)
			continue
		}
		if str(u, "metadata", "labels", "strimzi.io/cluster") != cluster || str(u, "spec", "authentication", "type") != "scram-sha-512" ||
			str(u, "spec", "authorization", "type") != "simple" {
			t.Errorf("KafkaUser %s: want cluster %s, scram-sha-512 authentication, simple authorization", user, cluster)
		}
		if got := grants(t, u); !slices.EqualFunc(got, normalGrants(want), grantEqual) {
			t.Errorf("KafkaUser %s grants\n  %v\nwant exactly (pkg/events/kafka)\n  %v", user, got, normalGrants(want))
		}
	}
	for _, u := range byKind(docs, "KafkaUser") {
		if n := str(u, "metadata", "name"); !users[n] {
			t.Errorf("KafkaUser %s is no client's", n)
		}
	}
}

// mountedSecret names the Secret and key a file of container c comes from
// (empty when it is not one mounted from a Secret's item).
func mountedSecret(podSpec, c any, path string) (secret, key string) {
	for _, m := range list(c, "volumeMounts") {
		dir := strings.TrimSuffix(str(m, "mountPath"), "/") + "/"
		rel, ok := strings.CutPrefix(path, dir)
		if !ok {
			continue
		}
		for _, v := range list(podSpec, "volumes") {
			if str(v, "name") != str(m, "name") || get(v, "secret") == nil {
				continue
			}
			for _, it := range list(v, "secret", "items") {
				if str(it, "path") == rel {
					return str(v, "secret", "secretName"), str(it, "key")
				}
			}
		}
	}
	return "", ""
}

// grants reads a KafkaUser's ACLs as kafka.Grants. Anything they cannot
// say (a deny, a host, the deprecated single operation) is an error, not
// ignored, so it cannot widen or blur what is compared.
func grants(t *testing.T, u obj) []kafka.Grant {
	var out []kafka.Grant
	for _, a := range list(u, "spec", "authorization", "acls") {
		if typ := str(a, "type"); typ != "" && typ != "allow" {
			t.Errorf("KafkaUser %s: ACL type %q", str(u, "metadata", "name"), typ)
		}
		if h := str(a, "host"); h != "" && h != "*" {
			t.Errorf("KafkaUser %s: ACL host %q", str(u, "metadata", "name"), h)
		}
		if get(a, "operation") != nil {
			t.Errorf("KafkaUser %s: the deprecated operation field; use operations", str(u, "metadata", "name"))
		}
		g := kafka.Grant{Type: str(a, "resource", "type"), Name: str(a, "resource", "name"), Pattern: str(a, "resource", "patternType")}
		if g.Pattern == "" {
			g.Pattern = "literal" // Strimzi's default
		}
		for _, op := range list(a, "operations") {
			s, _ := op.(string)
			g.Operations = append(g.Operations, s)
		}
		out = append(out, g)
	}
	return normalGrants(out)
}

// normalGrants sorts grants and their operations, so that lists equal in
// meaning compare equal.
func normalGrants(gs []kafka.Grant) []kafka.Grant {
	out := make([]kafka.Grant, len(gs))
	for i, g := range gs {
		g.Operations = slices.Sorted(slices.Values(g.Operations))
		out[i] = g
	}
	slices.SortFunc(out, func(a, b kafka.Grant) int {
		return strings.Compare(a.Type+"\x00"+a.Name+"\x00"+a.Pattern, b.Type+"\x00"+b.Name+"\x00"+b.Pattern)
	})
	return out
}

func grantEqual(a, b kafka.Grant) bool {
	return a.Type == b.Type && a.Name == b.Name && a.Pattern == b.Pattern && slices.Equal(a.Operations, b.Operations)
}

// ingressFrom lists, for pods with these labels, the ingress rules of every
// NetworkPolicy that selects them.
func ingressRules(docs []obj, podLabels any) []any {
	var out []any
	for _, np := range byKind(docs, "NetworkPolicy") {
		if selects(get(np, "spec", "podSelector"), podLabels) {
			out = append(out, list(np, "spec", "ingress")...)
		}
	}
	return out
}

func checkNetworkPolicies(t *testing.T, docs []obj) {
	deny := false
	for _, np := range byKind(docs, "NetworkPolicy") {
		ps, _ := get(np, "spec", "podSelector").(map[string]any)
		if len(ps) == 0 && slices.Contains(list(np, "spec", "policyTypes"), any("Ingress")) && len(list(np, "spec", "ingress")) == 0 {
			deny = true
		}
	}
	if !deny {
		t.Error("no default-deny ingress NetworkPolicy")
	}
	// Only sweepers reach the executors' gRPC port.
	ex := get(named(docs, "Deployment", "executor"), "spec", "template", "metadata", "labels")
	sweeperLabels := get(named(docs, "Deployment", "sweeper"), "spec", "template", "metadata", "labels")
	sweepers := 0
	for _, r := range ingressRules(docs, ex) {
		ports := list(r, "ports")
		opens := len(ports) == 0
		for _, p := range ports {
			if v := get(p, "port"); v == "grpc" || v == 9100 {
				opens = true
			}
		}
		if !opens {
			continue
		}
		for _, peer := range list(r, "from") {
			if get(peer, "podSelector") == nil || get(peer, "namespaceSelector") != nil || get(peer, "ipBlock") != nil ||
				!selects(get(peer, "podSelector"), sweeperLabels) || len(get(peer, "podSelector", "matchLabels").(map[string]any)) == 0 {
				t.Errorf("the executors' gRPC port is open to %v", peer)
			} else {
				sweepers++
			}
		}
	}
	if sweepers == 0 {
		t.Error("no NetworkPolicy lets the sweepers reach the executors")
	}
	// Prometheus reaches every service's metrics port.
	for _, d := range byKind(docs, "Deployment") {
		labels := get(d, "spec", "template", "metadata", "labels")
		var metricsPort string
		for _, p := range list(d, "spec", "template", "spec", "containers", "0", "ports") {
			if n := str(p, "name"); n == "metrics" || n == "http" {
				metricsPort = n
			}
		}
		ok := false
		for _, r := range ingressRules(docs, labels) {
			for _, peer := range list(r, "from") {
				if str(peer, "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name") != "monitoring" {
					continue
				}
				for _, p := range list(r, "ports") {
					if get(p, "port") == metricsPort {
						ok = true
					}
				}
			}
		}
		if !ok {
			t.Errorf("Prometheus cannot reach %s's %q port", str(d, "metadata", "name"), metricsPort)
		}
	}
	// The gateway's webhook reaches the reconciler's port.
	rec := get(named(docs, "Deployment", "reconciler"), "spec", "template", "metadata", "labels")
	hook := false
	for _, r := range ingressRules(docs, rec) {
		for _, p := range list(r, "ports") {
			if get(p, "port") == "http" {
				for _, peer := range list(r, "from") {
					if str(peer, "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name") == "ingress-nginx" {
						hook = true
					}
				}
			}
		}
	}
	if !hook {
		t.Error("the gateway's webhook (through the ingress controller) cannot reach the reconciler")
	}
	checkPostgresIngress(t, docs)
}

// checkPostgresIngress: each Postgres cluster's instances admit on 5432
// exactly the workloads that connect to it (dbURLs, otherDBClients), and
// on 5432 and 8000 (the instance manager) their own instances and the
// CloudNativePG operator's namespace; no other peer, nor the other
// cluster's instances, nor anything on 8000 else.
func checkPostgresIngress(t *testing.T, docs []obj) {
	workloads := map[string]any{} // app.kubernetes.io/name -> pod labels
	for _, kind := range []string{"Deployment", "Job"} {
		for _, d := range byKind(docs, kind) {
			labels := get(d, "spec", "template", "metadata", "labels")
			workloads[str(labels, "app.kubernetes.io/name")] = labels
		}
	}
	clusters := pgClusters(docs)
	for name := range clusters {
		instance := map[string]any{"cnpg.io/cluster": name, "cnpg.io/podRole": "instance"}
		reached := map[string]map[int]bool{} // peer -> ports
		reach := func(peer string, ports []int) {
			if reached[peer] == nil {
				reached[peer] = map[int]bool{}
			}
			for _, p := range ports {
				reached[peer][p] = true
			}
		}
		for _, r := range ingressRules(docs, instance) {
			var ports []int
			for _, p := range list(r, "ports") {
				if n, ok := num(p, "port"); ok && (n == 5432 || n == 8000) {
					ports = append(ports, n)
				}
			}
			if len(list(r, "ports")) == 0 {
				ports = []int{5432, 8000}
			}
			if len(ports) == 0 {
				continue // Prometheus' scrape of the metrics port
			}
			for _, peer := range list(r, "from") {
				pods, _ := get(peer, "podSelector", "matchLabels").(map[string]any)
				switch {
				case get(peer, "ipBlock") != nil:
					t.Errorf("%s: port %v is open to an ipBlock", name, ports)
				case get(peer, "namespaceSelector") != nil:
					if ns := str(peer, "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name"); ns != "cnpg-system" || get(peer, "podSelector") != nil {
						t.Errorf("%s: port %v is open to %v", name, ports, peer)
					}
					reach("operator", ports)
				case len(pods) == 0:
					t.Errorf("%s: port %v is open to every pod of the namespace", name, ports)
				default:
					for other := range clusters {
						if selects(get(peer, "podSelector"), map[string]any{"cnpg.io/cluster": other, "cnpg.io/podRole": "instance"}) {
							if other != name {
								t.Errorf("%s admits %s's instances on %v", name, other, ports)
							} else {
								reach("instances", ports)
							}
						}
					}
					for w, labels := range workloads {
						if selects(get(peer, "podSelector"), labels) {
							reach(w, ports)
						}
					}
				}
			}
		}
		for _, peer := range []string{"instances", "operator"} {
			if !reached[peer][5432] || !reached[peer][8000] {
				t.Errorf("%s: its %s do not reach 5432 and 8000 (replication, the instance manager)", name, peer)
			}
		}
		for w := range workloads {
			if got, want := reached[w][5432], usesCluster(w, name); got != want {
				t.Errorf("%s: %s reaches its 5432: %v; connects to it: %v", name, w, got, want)
			}
			if reached[w][8000] {
				t.Errorf("%s: %s reaches the instance manager (8000)", name, w)
			}
		}
	}
}

// checkExposure: payments-api is the only service exposed, plus the one
// webhook path of the reconciler.
func checkExposure(t *testing.T, docs []obj) {
	for _, s := range byKind(docs, "Service") {
		if typ := str(s, "spec", "type"); typ == "LoadBalancer" || typ == "NodePort" {
			if str(s, "metadata", "name") != "payments-api" {
				t.Errorf("Service %s is exposed as %s", str(s, "metadata", "name"), typ)
			}
		}
	}
	api := false
	for _, ing := range byKind(docs, "Ingress") {
		for _, r := range list(ing, "spec", "rules") {
			for _, p := range list(r, "http", "paths") {
				backend := str(p, "backend", "service", "name")
				switch {
				case backend == "payments-api":
					api = true
				case backend == "reconciler" && (str(p, "path") == "/webhooks/gateway" || str(p, "path") == "/webhooks/stripe") &&
					str(p, "pathType") == "Exact":
				default:
					t.Errorf("Ingress %s exposes %s %s", str(ing, "metadata", "name"), backend, str(p, "path"))
				}
			}
		}
	}
	if !api {
		t.Error("payments-api is not exposed")
	}
}

func checkMonitoring(t *testing.T, docs []obj) {
	sms := byKind(docs, "ServiceMonitor")
	if len(sms) == 0 {
		t.Fatal("no ServiceMonitor")
	}
	// Every Deployment's metrics are scraped: a Service selects its pods,
	// the ServiceMonitor selects the Service and scrapes one of its ports.
	for _, d := range byKind(docs, "Deployment") {
		labels := get(d, "spec", "template", "metadata", "labels")
		scraped := false
		for _, s := range byKind(docs, "Service") {
			if !serviceSelects(s, labels) {
				continue
			}
			for _, sm := range sms {
				if !selects(get(sm, "spec", "selector"), get(s, "metadata", "labels")) {
					continue
				}
				for _, ep := range list(sm, "spec", "endpoints") {
					for _, p := range list(s, "spec", "ports") {
						if str(p, "name") == str(ep, "port") && str(ep, "path") == "/metrics" {
							scraped = true
						}
					}
				}
			}
		}
		if !scraped {
			t.Errorf("%s's /metrics is not scraped by a ServiceMonitor", str(d, "metadata", "name"))
		}
	}
	rules := byKind(docs, "PrometheusRule")
	if len(rules) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(rules))
	}
	have := map[string]bool{}
	for _, g := range list(rules[0], "spec", "groups") {
		for _, r := range list(g, "rules") {
			have[str(r, "alert")] = true
		}
	}
	for _, name := range alertNames(t) {
		if !have[name] {
			t.Errorf("alert %s of deploy/prometheus is missing from the PrometheusRule", name)
		}
	}
}

type ruleFileT struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadAlerts(t *testing.T) ruleFileT {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFileT
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	return rf
}

func alertNames(t *testing.T) []string {
	var out []string
	for _, g := range loadAlerts(t).Groups {
		for _, r := range g.Rules {
			out = append(out, r.Alert)
		}
	}
	return out
}

// prometheusRule is base/prometheusrule.yaml as generated from alerts.yml:
// a header, then the file's groups indented under spec.
func prometheusRule(t *testing.T) []byte {
	t.Helper()
	src, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.WriteString(`# Generated from deploy/prometheus/alerts.yml: edit that file, then run
#   go test ./deploy/k8s -run TestPrometheusRuleInSync -args -update
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: paysched
  labels:
    release: kube-prometheus-stack
spec:
`)
	lines := strings.SplitAfter(string(src), "\n")
	i := 0
	for i < len(lines) && strings.HasPrefix(lines[i], "#") {
		i++
	}
	for _, l := range lines[i:] {
		if strings.TrimSpace(l) != "" {
			b.WriteString("  ")
		}
		b.WriteString(l)
	}
	return b.Bytes()
}

func TestPrometheusRuleInSync(t *testing.T) {
	want := prometheusRule(t)
	if *update {
		if err := os.WriteFile(ruleFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(ruleFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date with %s: run go test ./deploy/k8s -run TestPrometheusRuleInSync -args -update", ruleFile, alertsFile)
	}
}

func TestAlertRules(t *testing.T) {
	rf := loadAlerts(t)
	if len(rf.Groups) == 0 {
		t.Fatal("no rule groups")
	}
	seen := map[string]bool{}
	var exprs []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("group %s: a rule without alert or expr", g.Name)
				continue
			}
			if seen[r.Alert] {
				t.Errorf("%s: defined twice", r.Alert)
			}
			seen[r.Alert] = true
			exprs = append(exprs, r.Expr)
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: no %s annotation", r.Alert, a)
				}
			}
			if !strings.Contains(r.Annotations["runbook"], r.Alert) {
				t.Errorf("%s: the runbook hint does not name the alert's entry in docs/OPERATIONS.md", r.Alert)
			}
			if strings.Contains(r.Expr, `kind="DUPLICATE_CHARGE"`) && r.Labels["severity"] != "critical" {
				t.Errorf("%s: duplicate charges must be critical", r.Alert)
			}
		}
	}
	all := strings.Join(exprs, "\n")
	// What issue 6 asks the alerts to cover, by the metric each needs.
	for _, tc := range []struct{ what, metric string }{
		{"oldest due age", "oldest_due_pending_age_seconds"},
		{"stalled sweep: claims", "paysched_claims_total"},
		{"stalled sweep: backlog", "backlog"},
		{"lease expiries", "paysched_lease_expiries_total"},
		{"DLQ arrivals", "paysched_dead_letters_total"},
		{"gateway errors", "paysched_gateway_outcomes_total"},
		// From the database's side (CloudNativePG's exporter), guarded.
		{"CDC slot lag", "cnpg_cdc_slot_lag_bytes"},
		{"CDC slot gone", `absent(cnpg_cdc_slot_lag_bytes{slot_name="paysched_cdc"})`},
		{"CDC consumer gone", "cnpg_cdc_slot_active"},
		{"Postgres exporter gone", `absent(cnpg_collector_up`},
		{"CDC slot not on a standby", "cnpg_cdc_failover_ready"},
		{"reconciliation mismatches", "paysched_reconciliation_mismatches_total"},
		{"duplicate charges", `kind="DUPLICATE_CHARGE"`},
	} {
		if !strings.Contains(all, tc.metric) {
			t.Errorf("no alert covers %s (%s)", tc.what, tc.metric)
		}
	}
	checkMetricNames(t, "alerts", exprs)
}

func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	dsVar := false
	for _, v := range list(dash, "templating", "list") {
		if str(v, "type") == "datasource" && str(v, "query") == "prometheus" && str(v, "name") == "datasource" {
			dsVar = true
		}
	}
	if !dsVar {
		t.Error("no Prometheus datasource variable named datasource")
	}
	var exprs []string
	var walk func(panels []any)
	walk = func(panels []any) {
		for _, p := range panels {
			walk(list(p, "panels"))
			for _, tg := range list(p, "targets") {
				if uid := str(tg, "datasource", "uid"); uid != "${datasource}" {
					t.Errorf("panel %q: target datasource %q, want ${datasource}", str(p, "title"), uid)
				}
				exprs = append(exprs, str(tg, "expr"))
			}
			if len(list(p, "targets")) > 0 && str(p, "datasource", "uid") != "${datasource}" {
				t.Errorf("panel %q: datasource is not ${datasource}", str(p, "title"))
			}
		}
	}
	walk(list(dash, "panels"))
	all := strings.Join(exprs, "\n")
	for _, tc := range []struct{ what, expr string }{
		{"backlog", "backlog{"},
		{"oldest due age", "oldest_due_pending_age_seconds"},
		{"lateness histogram", "paysched_trigger_lateness_seconds_bucket"},
		{"claims/s", "paysched_claims_total"},
		{"gateway outcomes", "paysched_gateway_outcomes_total"},
		{"gateway latency", "paysched_gateway_latency_seconds_bucket"},
		{"DLQ arrivals", "paysched_dead_letters_total"},
		{"CDC slot lag", "paysched_cdc_slot_lag_bytes"},
		{"CDC lag", "paysched_cdc_lag_seconds_bucket"},
		{"consumer lag", "kafka_consumergroup_lag"},
		{"reconciliation mismatches", "paysched_reconciliation_mismatches_total"},
	} {
		if !strings.Contains(all, tc.expr) {
			t.Errorf("no panel shows %s (%s)", tc.what, tc.expr)
		}
	}
	checkMetricNames(t, "dashboard", exprs)
}

// External metrics: not exported by paysched code.
var externalMetrics = map[string]string{
	"kafka_consumergroup_lag": "Strimzi's Kafka Exporter",
	"cnpg_collector_up":       "CloudNativePG's exporter",
}

// cnpgQueryMetrics are the metrics the Cluster's custom queries
// (base/postgres-monitoring.yaml) make: cnpg_<query>_<column> for every
// column that is not a label.
func cnpgQueryMetrics(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("base/postgres-monitoring.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	var queries map[string]struct {
		Query   string `yaml:"query"`
		Metrics []map[string]struct {
			Usage string `yaml:"usage"`
		} `yaml:"metrics"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["queries"]), &queries); err != nil {
		t.Fatalf("postgres-monitoring.yaml queries: %v", err)
	}
	out := map[string]bool{}
	for name, q := range queries {
		for _, m := range q.Metrics {
			for col, spec := range m {
				if !strings.Contains(q.Query, col) {
					t.Errorf("query %s has no column %s", name, col)
				}
				if spec.Usage != "LABEL" {
					out["cnpg_"+name+"_"+col] = true
				}
			}
		}
	}
	return out
}

// checkMetricNames checks that every paysched metric the expressions read
// is registered somewhere under pkg/ (histogram series by their base name).
func checkMetricNames(t *testing.T, what string, exprs []string) {
	t.Helper()
	registered := registeredMetrics(t)
	for m := range cnpgQueryMetrics(t) {
		registered[m] = true
	}
	re := regexp.MustCompile(`\b(paysched_[a-z0-9_]+|oldest_due_pending_age_seconds|backlog|processing|kafka_[a-z0-9_]+|cnpg_[a-z0-9_]+)\b`)
	quoted := regexp.MustCompile(`"[^"]*"`)
	for _, e := range exprs {
		// Label values ("paysched_cdc") are not metrics.
		for _, m := range re.FindAllString(quoted.ReplaceAllString(e, `""`), -1) {
			base := m
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(m, suffix); ok && registered[b] {
					base = b
				}
			}
			if !registered[base] && externalMetrics[base] == "" {
				t.Errorf("%s reads %s, which no package under pkg/ registers", what, m)
			}
		}
	}
}

func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`Name:\s*"([a-zA-Z_:][a-zA-Z0-9_:]*)"`)
	out := map[string]bool{}
	err := filepath.WalkDir(pkgDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Contains(b, []byte("prometheus.")) {
			return nil
		}
		for _, m := range re.FindAllSubmatch(b, -1) {
			out[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
