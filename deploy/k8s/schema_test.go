package k8s_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	sigsjson "sigs.k8s.io/json"
)

// upstream maps each apiVersion/kind we render to its upstream Go type. An
// object of a kind not listed here, or listed in fieldPaths, fails the test:
// a new kind is added with the type that checks it.
var upstream = map[string]func() any{
	"v1/ConfigMap":                            func() any { return &corev1.ConfigMap{} },
	"v1/Namespace":                            func() any { return &corev1.Namespace{} },
	"v1/Secret":                               func() any { return &corev1.Secret{} },
	"v1/Service":                              func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                       func() any { return &corev1.ServiceAccount{} },
	"apps/v1/Deployment":                      func() any { return &appsv1.Deployment{} },
	"autoscaling/v2/HorizontalPodAutoscaler":  func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"batch/v1/Job":                            func() any { return &batchv1.Job{} },
	"networking.k8s.io/v1/Ingress":            func() any { return &networkingv1.Ingress{} },
	"networking.k8s.io/v1/NetworkPolicy":      func() any { return &networkingv1.NetworkPolicy{} },
	"policy/v1/PodDisruptionBudget":           func() any { return &policyv1.PodDisruptionBudget{} },
	"monitoring.coreos.com/v1/PodMonitor":     func() any { return &monitoringv1.PodMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return &monitoringv1.PrometheusRule{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &monitoringv1.ServiceMonitor{} },
	"cert-manager.io/v1/Certificate":          func() any { return &cmv1.Certificate{} },
	"cert-manager.io/v1/Issuer":               func() any { return &cmv1.Issuer{} },
}

// fieldPaths lists, for the operators whose API types no module here
// serves (Strimzi's are Java; the Go proxy refuses CloudNativePG's), every
// field path our objects may use. Each was checked against the operator's
// CRD schema: Strimzi 1.2.0's kafka.strimzi.io/v1 (the same for these
// kinds in 0.49.1, the release the images pin) and CloudNativePG 1.30's
// postgresql.cnpg.io/v1. "[]" is any list item; a path ending in ".*" is a
// free-form map (labels, broker or server settings). A path outside the
// list fails: check it against the CRD, then add it.
var fieldPaths = map[string][]string{
	"kafka.strimzi.io/v1/Kafka": {
		"spec.entityOperator.topicOperator.image", "spec.entityOperator.userOperator.image",
		"spec.kafka.authorization.type", "spec.kafka.config.*", "spec.kafka.image", "spec.kafka.version",
		"spec.kafka.listeners[].authentication.type", "spec.kafka.listeners[].name",
		"spec.kafka.listeners[].networkPolicyPeers[].podSelector.matchLabels.*",
		"spec.kafka.listeners[].port", "spec.kafka.listeners[].tls", "spec.kafka.listeners[].type",
		"spec.kafkaExporter.groupRegex", "spec.kafkaExporter.image", "spec.kafkaExporter.topicRegex",
	},
	"kafka.strimzi.io/v1/KafkaNodePool": {
		"spec.replicas", "spec.roles[]",
		"spec.resources.limits.cpu", "spec.resources.limits.memory", "spec.resources.requests.cpu", "spec.resources.requests.memory",
		"spec.storage.type", "spec.storage.volumes[].deleteClaim", "spec.storage.volumes[].id",
		"spec.storage.volumes[].kraftMetadata", "spec.storage.volumes[].size", "spec.storage.volumes[].type",
	},
	"kafka.strimzi.io/v1/KafkaTopic": {"spec.config.*", "spec.partitions", "spec.replicas", "spec.topicName"},
	"kafka.strimzi.io/v1/KafkaUser": {
		"spec.authentication.type", "spec.authorization.type", "spec.authorization.acls[].operations[]",
		"spec.authorization.acls[].resource.name", "spec.authorization.acls[].resource.patternType",
		"spec.authorization.acls[].resource.type",
	},
	"postgresql.cnpg.io/v1/Cluster": {
		"spec.affinity.enablePodAntiAffinity", "spec.affinity.topologyKey",
		"spec.bootstrap.initdb.database", "spec.bootstrap.initdb.owner", "spec.enablePDB", "spec.imageName", "spec.instances",
		"spec.managed.roles[].createdb", "spec.managed.roles[].ensure", "spec.managed.roles[].inRoles[]",
		"spec.managed.roles[].inherit", "spec.managed.roles[].login", "spec.managed.roles[].name",
		"spec.managed.roles[].passwordSecret.name", "spec.managed.roles[].replication",
		"spec.monitoring.customQueriesConfigMap[].key", "spec.monitoring.customQueriesConfigMap[].name",
		"spec.postgresql.parameters.*", "spec.postgresql.synchronous.dataDurability",
		"spec.postgresql.synchronous.method", "spec.postgresql.synchronous.number", "spec.primaryUpdateStrategy",
		"spec.replicationSlots.highAvailability.enabled", "spec.replicationSlots.highAvailability.synchronizeLogicalDecoding",
		"spec.resources.limits.cpu", "spec.resources.limits.memory", "spec.resources.requests.cpu", "spec.resources.requests.memory",
		"spec.storage.size", "spec.walStorage.size",
	},
	// CloudNativePG's Database (1.25 or later) requires all three.
	"postgresql.cnpg.io/v1/Database": {"spec.cluster.name", "spec.name", "spec.owner"},
}

// required lists the fields a kind in fieldPaths must set.
var required = map[string][]string{
	"postgresql.cnpg.io/v1/Database": {"spec.cluster.name", "spec.name", "spec.owner"},
	"kafka.strimzi.io/v1/KafkaUser":  {"spec.authorization.acls[].operations[]", "spec.authorization.acls[].resource.type"},
}

// metadataPaths are the fields every object may set in its metadata.
var metadataPaths = []string{"apiVersion", "kind", "metadata.name", "metadata.namespace", "metadata.labels.*", "metadata.annotations.*"}

// TestObjectsMatchUpstreamSchemas decodes every rendered object strictly
// into its operator's type: an unknown field (a typo, or one the API
// removed), a field of the wrong type or a duplicate key fails. The
// objects of operators without a Go module here are held to the field
// paths checked against their CRDs.
func TestObjectsMatchUpstreamSchemas(t *testing.T) {
	for _, overlay := range []string{"dev", "prod"} {
		t.Run(overlay, func(t *testing.T) {
			for _, d := range render(t, overlay) {
				gvk := str(d, "apiVersion") + "/" + str(d, "kind")
				name := gvk + " " + str(d, "metadata", "name")
				if err := checkSchema(gvk, d); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
		})
	}
}

// TestSchemaCheckRefusesWhatTheAPIDoesNot proves the check itself: each
// object below is what an apply would refuse or silently drop.
func TestSchemaCheckRefusesWhatTheAPIDoesNot(t *testing.T) {
	cases := []struct {
		name string
		gvk  string
		obj  string
	}{
		{"typo in a pod spec", "apps/v1/Deployment",
			`{"metadata":{"name":"x"},"spec":{"template":{"spec":{"containers":[{"name":"c","imagePullPolcy":"Always"}]}}}}`},
		{"wrong case", "v1/Service", `{"metadata":{"name":"x"},"spec":{"Type":"ClusterIP"}}`},
		{"wrong type", "apps/v1/Deployment", `{"metadata":{"name":"x"},"spec":{"replicas":"two"}}`},
		{"duplicate key", "v1/ConfigMap", `{"metadata":{"name":"x"},"data":{"a":"1","a":"2"}}`},
		{"unknown in a monitor", "monitoring.coreos.com/v1/ServiceMonitor",
			`{"metadata":{"name":"x"},"spec":{"endpoints":[{"port":"m","intervall":"30s"}],"selector":{}}}`},
		{"unknown in a certificate", "cert-manager.io/v1/Certificate",
			`{"metadata":{"name":"x"},"spec":{"secretName":"s","issuerRef":{"name":"i"},"dnsName":["a"]}}`},
		{"v1beta2's removed ACL operation", "kafka.strimzi.io/v1/KafkaUser",
			`{"metadata":{"name":"x"},"spec":{"authorization":{"type":"simple","acls":[{"resource":{"type":"topic","name":"t"},"operation":"Read"}]}}}`},
		{"v1beta2's Kafka replicas", "kafka.strimzi.io/v1/Kafka",
			`{"metadata":{"name":"x"},"spec":{"kafka":{"replicas":3}}}`},
		{"a Database without its cluster", "postgresql.cnpg.io/v1/Database",
			`{"metadata":{"name":"x"},"spec":{"name":"d","owner":"o"}}`},
		{"Strimzi's removed v1beta2", "kafka.strimzi.io/v1beta2/KafkaTopic", `{"metadata":{"name":"x"},"spec":{"partitions":1}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var d obj
			if err := json.Unmarshal([]byte(c.obj), &d); err != nil {
				t.Fatal(err)
			}
			if err := checkSchemaJSON(c.gvk, []byte(c.obj), d); err == nil {
				t.Errorf("accepted: %s", c.obj)
			}
		})
	}
}

func checkSchema(gvk string, d obj) error {
	raw, err := json.Marshal(d)
	if err != nil {
		return err
	}
	return checkSchemaJSON(gvk, raw, d)
}

func checkSchemaJSON(gvk string, raw []byte, d obj) error {
	if newT, ok := upstream[gvk]; ok {
		v := newT()
		strict, err := sigsjson.UnmarshalStrict(raw, v, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
		if err != nil {
			return fmt.Errorf("decode into %s: %w", reflect.TypeOf(v).Elem(), err)
		}
		if len(strict) > 0 {
			return fmt.Errorf("strict decode into %s: %v", reflect.TypeOf(v).Elem(), strict)
		}
		return nil
	}
	allowed, ok := fieldPaths[gvk]
	if !ok {
		return fmt.Errorf("no upstream type or checked field list for %s", gvk)
	}
	allowed = append(slices.Clone(allowed), metadataPaths...)
	var unknown []string
	used := map[string]bool{}
	for _, p := range leafPaths(d, "") {
		match := ""
		for _, a := range allowed {
			if a == p || strings.HasSuffix(a, ".*") && strings.HasPrefix(p, strings.TrimSuffix(a, "*")) {
				match = a
				break
			}
		}
		if match == "" {
			unknown = append(unknown, p)
		}
		used[match] = true
	}
	var missing []string
	for _, r := range required[gvk] {
		if !used[r] {
			missing = append(missing, r)
		}
	}
	if len(unknown)+len(missing) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("fields not in the checked schema: %v; required and missing: %v", unknown, missing)
	}
	return nil
}

// leafPaths lists v's scalar fields as dotted paths, list items as "[]".
func leafPaths(v any, prefix string) []string {
	join := func(k string) string {
		if prefix == "" {
			return k
		}
		return prefix + "." + k
	}
	switch x := v.(type) {
	case map[string]any:
		var out []string
		for k, e := range x {
			out = append(out, leafPaths(e, join(k))...)
		}
		return out
	case []any:
		var out []string
		for _, e := range x {
			out = append(out, leafPaths(e, prefix+"[]")...)
		}
		return out
	default:
		return []string{prefix}
	}
}
