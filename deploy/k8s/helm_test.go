package k8s_test

// The Helm chart (deploy/helm/paysched): its objects are the kustomize
// base's (files/base, held equal to base/ here: the base is the source of
// truth), rendered with the chart's values. It lints strictly with each
// ci/*-values.yaml, its schema refuses a misspelled key, it refuses the
// zero digest, its prod values render what the prod overlay renders (the
// differences listed below, each with its reason), its renderings go
// through the overlays' checks (overlays in manifest_test.go), and its
// README's parameter table is the one its values' comments make.

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/paysched/paysched/test/nodetest"
)

const chartDir = "../helm/paysched"

func helmBin(t *testing.T) string {
	t.Helper()
	p, _ := filepath.Abs(filepath.Join("..", "..", ".tools", "helm"))
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: run deploy/local/tools.sh (make test does)", p)
	}
	return p
}

// helm runs helm with args and returns its output and error.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, stderr bytes.Buffer
	cmd := exec.Command(helmBin(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	if err != nil {
		return stderr.String(), err
	}
	return out.String(), nil
}

// renderChart is `helm template` of the chart with ci/<values>-values.yaml
// into the namespace paysched.
func renderChart(t *testing.T, values string, extra ...string) []obj {
	t.Helper()
	args := append([]string{"template", "paysched", chartDir, "--namespace", "paysched", "-f",
		filepath.Join(chartDir, "ci", values+"-values.yaml")}, extra...)
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm template (%s): %v\n%s", values, err, out)
	}
	return decodeAll(t, []byte(out))
}

func TestTheChartCarriesTheKustomizeBase(t *testing.T) {
	base, err := filepath.Glob("base/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range base {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		want = append(want, filepath.Base(f))
		a, _ := os.ReadFile(f)
		b, err := os.ReadFile(filepath.Join(chartDir, "files", "base", filepath.Base(f)))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs in the chart's files/base (the kustomize base is the source: make helm-sync)", f)
		}
	}
	got, _ := filepath.Glob(filepath.Join(chartDir, "files", "base", "*.yaml"))
	if len(got) != len(want) {
		t.Errorf("the chart carries %d base files, the base has %d", len(got), len(want))
	}
}

func TestTheChartLintsStrictly(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if len(files) < 4 {
		t.Fatalf("ci values: %v", files)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if out, err := helm(t, "lint", "--strict", chartDir, "-f", f); err != nil {
				t.Fatalf("helm lint --strict: %v\n%s", err, out)
			}
		})
	}
}

func TestTheChartRefusesWhatItMust(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"the zero digest", nil, "zero placeholder"},
		{"a misspelled key", []string{"-f", filepath.Join(chartDir, "ci", "default-values.yaml"), "--set", "image.registyr=x"}, "registyr"},
		{"a misspelled component", []string{"-f", filepath.Join(chartDir, "ci", "default-values.yaml"), "--set", "components.executer.replicas=2"}, "executer"},
		{"a replica count that is no number", []string{"-f", filepath.Join(chartDir, "ci", "default-values.yaml"), "--set-string", "components.sweeper.replicas=two"}, "replicas"},
		{"its own database without its host", []string{"-f", filepath.Join(chartDir, "ci", "default-values.yaml"), "--set", "postgres.enabled=false"}, "postgres.external"},
		{"its own Kafka without its brokers", []string{"-f", filepath.Join(chartDir, "ci", "default-values.yaml"), "--set", "kafka.enabled=false"}, "kafka.external"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := helm(t, append([]string{"template", "paysched", chartDir, "--namespace", "paysched"}, c.args...)...)
			if err == nil || !strings.Contains(out, c.want) {
				t.Fatalf("rendered (%v), want a refusal naming %q:\n%.600s", err, c.want, out)
			}
		})
	}
}

// hashSuffix is kustomize's configMapGenerator name suffix.
var hashSuffix = regexp.MustCompile(`paysched-config-[a-z0-9]{10}\b`)

// helmOnly are the labels and annotations Helm adds that kustomize does
// not: its own bookkeeping, the config checksum that rolls the pods (the
// overlay renames the ConfigMap by a hash of its content instead) and the
// migrate Job's hook.
var helmOnly = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "checksum/config",
	"helm.sh/hook", "helm.sh/hook-weight", "helm.sh/hook-delete-policy"}

// comparable is o as JSON with what legitimately differs between the two
// renderings taken out: the ConfigMap's hash suffix, Helm's labels and
// annotations, and the image's digest (the overlay carries the zero
// placeholder, which the chart refuses to render).
func comparable(t *testing.T, o obj) any {
	t.Helper()
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	s := hashSuffix.ReplaceAllString(string(b), "paysched-config")
	s = regexp.MustCompile(`@sha256:[0-9a-f]{64}`).ReplaceAllString(s, "@sha256:<digest>")
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	var strip func(any)
	strip = func(x any) {
		switch m := x.(type) {
		case map[string]any:
			for _, k := range []string{"labels", "annotations"} {
				if l, ok := m[k].(map[string]any); ok {
					for _, h := range helmOnly {
						delete(l, h)
					}
					if len(l) == 0 {
						delete(m, k)
					}
				}
			}
			for _, v := range m {
				strip(v)
			}
		case []any:
			for _, v := range m {
				strip(v)
			}
		}
	}
	strip(v)
	return v
}

// TestTheChartMatchesTheProdOverlay: the chart with ci/prod-values.yaml
// renders the prod overlay's objects, field for field, but for these:
//   - the Namespace: Helm installs into one (--create-namespace); the
//     overlay makes it, with its Pod Security labels (docs/OPERATIONS.md
//     labels the chart's namespace so);
//   - paysched-config's name: the overlay suffixes it with a hash of its
//     content, the chart keeps it and puts the hash on the pod templates;
//   - Helm's own labels and annotations, and the migrate Job's hook;
//   - the image digest (the overlay's zero placeholder is refused here).
func TestTheChartMatchesTheProdOverlay(t *testing.T) {
	chart, overlay := renderChart(t, "prod"), render(t, "prod")
	key := func(o obj) string {
		return str(o, "kind") + "/" + hashSuffix.ReplaceAllString(str(o, "metadata", "name"), "paysched-config")
	}
	byKey := func(docs []obj) map[string]obj {
		m := map[string]obj{}
		for _, d := range docs {
			m[key(d)] = d
		}
		return m
	}
	c, o := byKey(chart), byKey(overlay)
	var onlyOverlay, onlyChart []string
	for k := range o {
		if _, ok := c[k]; !ok {
			onlyOverlay = append(onlyOverlay, k)
		}
	}
	for k := range c {
		if _, ok := o[k]; !ok {
			onlyChart = append(onlyChart, k)
		}
	}
	slices.Sort(onlyOverlay)
	if !slices.Equal(onlyOverlay, []string{"Namespace/paysched"}) || len(onlyChart) > 0 {
		t.Errorf("only in the overlay: %v (want the Namespace alone); only in the chart: %v", onlyOverlay, onlyChart)
	}
	for k, od := range o {
		cd, ok := c[k]
		if !ok {
			continue
		}
		if a, b := comparable(t, od), comparable(t, cd); !reflect.DeepEqual(a, b) {
			ja, _ := json.MarshalIndent(a, "", " ")
			jb, _ := json.MarshalIndent(b, "", " ")
			t.Errorf("%s differs:\noverlay %s\nchart   %s", k, ja, jb)
		}
	}
}

// TestTheChartsOtherValuesRender: the external and minimal values render
// every paysched Deployment, without the switched-off dependencies, with
// the installation's names in place, and the egress it asked for.
func TestTheChartsOtherValuesRender(t *testing.T) {
	for _, c := range []struct {
		values  string
		absent  []string
		present []string
	}{
		{"minimal", []string{"Cluster", "Kafka", "KafkaTopic", "KafkaUser", "Certificate", "Issuer", "PrometheusRule", "ServiceMonitor", "PodMonitor"},
			[]string{"pg.db.example.internal:5432", "my-pg-ca", "kafka-0.kafka.example.internal:9093", "my-kafka-ca", "my-pg-owner", "my-pg-events-owner"}},
		{"external", []string{"Cluster", "Kafka", "KafkaTopic", "KafkaUser"},
			[]string{"pg.db.example.internal:6432", "payments-app", "payments-db-api", "registry.example.org/payments/paysched@sha256:2222", "GODEBUG",
				"payments-cdc", "internal-nginx", "payments.example.org"}},
	} {
		t.Run(c.values, func(t *testing.T) {
			docs := renderChart(t, c.values)
			var deployments []string
			for _, d := range byKind(docs, "Deployment") {
				deployments = append(deployments, str(d, "metadata", "name"))
			}
			if len(deployments) != 9 {
				t.Errorf("Deployments %v, want paysched's nine", deployments)
			}
			for _, kind := range c.absent {
				if n := len(byKind(docs, kind)); n > 0 {
					t.Errorf("%d %s rendered with its switch off", n, kind)
				}
			}
			all, _ := json.Marshal(docs)
			for _, p := range c.present {
				if !strings.Contains(string(all), p) {
					t.Errorf("the rendering lacks %q", p)
				}
			}
			for _, own := range []string{"paysched-pg-rw", "paysched-kafka-bootstrap", "paysched-pg-app", "paysched-pg-events-app"} {
				if strings.Contains(string(all), own) {
					t.Errorf("the rendering still names the chart's own %s", own)
				}
			}
			if named(docs, "NetworkPolicy", "paysched-extra-egress") == nil {
				t.Error("no NetworkPolicy for the egress to the installation's own database and brokers")
			}
			for _, d := range docs {
				spec, _ := json.Marshal(get(d, "spec"))
				if strings.Contains(string(spec), "cnpg.io/cluster") || strings.Contains(string(spec), "strimzi.io/") {
					t.Errorf("%s %s is about the chart's own database or brokers, switched off", d["kind"], str(d, "metadata", "name"))
				}
			}
		})
	}
}

// TestTheClustersKeepTheirMetricsQueries: the chart's databases without
// the Prometheus operator still get the ConfigMap their Clusters name.
func TestTheClustersKeepTheirMetricsQueries(t *testing.T) {
	docs := renderChart(t, "unscraped")
	if named(docs, "ConfigMap", "paysched-pg-monitoring") == nil || len(byKind(docs, "Cluster")) != 2 {
		t.Fatal("the Clusters name paysched-pg-monitoring, which is not rendered")
	}
	if n := len(byKind(docs, "PodMonitor")) + len(byKind(docs, "PrometheusRule")); n > 0 {
		t.Errorf("%d monitoring objects rendered with prometheus off", n)
	}
}

func TestTheChartPackages(t *testing.T) {
	dir := t.TempDir()
	if out, err := helm(t, "package", chartDir, "--destination", dir); err != nil {
		t.Fatalf("helm package: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "paysched-0.1.0.tgz")); err != nil {
		t.Fatal(err)
	}
}

// TestTheChartsREADMEIsCurrent: the README's parameter table is what
// @bitnami/readme-generator-for-helm makes of the values' comments.
func TestTheChartsREADMEIsCurrent(t *testing.T) {
	nodetest.Require(t, "the chart README's check", "node", "npm", "npx")
	dir := nodetest.InstallFrom(t, filepath.Join("testdata", "readme"), "package.json", "package-lock.json")
	work := t.TempDir()
	for _, f := range []string{"values.yaml", "README.md"} {
		b, err := os.ReadFile(filepath.Join(chartDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	nodetest.Run(t, dir, nil, "npx", "--no-install", "readme-generator",
		"--values", filepath.Join(work, "values.yaml"), "--readme", filepath.Join(work, "README.md"))
	want, _ := os.ReadFile(filepath.Join(work, "README.md"))
	got, _ := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if !bytes.Equal(got, want) {
		t.Fatal("deploy/helm/paysched/README.md's parameter table is stale: make helm-readme")
	}
}
