package k8s_test

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// bytesOf reads a Postgres size ("12GB", "512MB": units of 1024) or a
// Kubernetes quantity ("20Gi", "5Gi").
func bytesOf(t *testing.T, s string) float64 {
	t.Helper()
	units := map[string]float64{"kB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40,
		"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
	for u, m := range units {
		if n, ok := strings.CutSuffix(s, u); ok {
			v, err := strconv.ParseFloat(n, 64)
			if err != nil {
				t.Fatalf("size %q: %v", s, err)
			}
			return v * m
		}
	}
	t.Fatalf("size %q: no unit", s)
	return 0
}

// pgCluster is the rendered CloudNativePG Cluster of the schedule, the one
// cdc streams from.
func pgCluster(t *testing.T, docs []obj) obj {
	t.Helper()
	c := pgClusters(docs)[schedulePG]
	if c == nil {
		t.Fatalf("no CloudNativePG Cluster %s", schedulePG)
	}
	return c
}

// eachPGCluster runs f on every rendered CloudNativePG Cluster (the
// schedule's and the events'), in a subtest named after it.
func eachPGCluster(t *testing.T, docs []obj, f func(t *testing.T, cluster obj)) {
	t.Helper()
	clusters := pgClusters(docs)
	if len(clusters) == 0 {
		t.Fatal("no CloudNativePG Cluster")
	}
	for _, name := range slices.Sorted(maps.Keys(clusters)) {
		t.Run(name, func(t *testing.T) { f(t, clusters[name]) })
	}
}

// TestSlotCannotFillTheWALVolume: on every cluster, max_slot_wal_keep_size
// leaves a quarter of the volume that holds WAL for everything else, so a
// stuck slot (cdc's, or a lost standby's) is invalidated (and alerted on)
// before the disk fills and stops the primary.
func TestSlotCannotFillTheWALVolume(t *testing.T) {
	for _, overlay := range []string{"dev", "prod"} {
		t.Run(overlay, func(t *testing.T) {
			eachPGCluster(t, render(t, overlay), func(t *testing.T, cluster obj) {
				keep := str(cluster, "spec", "postgresql", "parameters", "max_slot_wal_keep_size")
				if keep == "" || keep == "-1" {
					t.Fatal("max_slot_wal_keep_size is unset: a stuck slot keeps WAL until the disk is full")
				}
				// WAL sits on walStorage when there is one, else with the data.
				vol := str(cluster, "spec", "walStorage", "size")
				if vol == "" {
					vol = str(cluster, "spec", "storage", "size")
				}
				if k, v := bytesOf(t, keep), bytesOf(t, vol); k > 0.75*v {
					t.Errorf("max_slot_wal_keep_size %s is more than 75%% of the WAL volume %s", keep, vol)
				}
			})
		})
	}
}

// TestFailoverSlots: Postgres is 17 or later (failover slots), pinned by
// digest; the Cluster synchronizes cdc's logical slot to its standbys
// (synchronizeLogicalDecoding, with the two parameters PostgreSQL needs
// for it); cdc streams from the primary and does not turn failover off;
// and the exporter queries the slot alerts read are installed and scraped.
func TestFailoverSlots(t *testing.T) {
	for _, overlay := range []string{"dev", "prod"} {
		t.Run(overlay, func(t *testing.T) {
			docs := render(t, overlay)
			cluster := pgCluster(t, docs)
			image := str(cluster, "spec", "imageName")
			ref, digest, pinned := strings.Cut(image, "@sha256:")
			if !pinned || len(digest) != 64 {
				t.Errorf("imageName %s is not pinned by digest", image)
			}
			tag := ref[strings.LastIndex(ref, ":")+1:]
			major, err := strconv.Atoi(strings.SplitN(tag, ".", 2)[0])
			if err != nil || major < 17 {
				t.Errorf("imageName %s: want PostgreSQL 17 or later (failover slots)", image)
			}
			if get(cluster, "spec", "replicationSlots", "highAvailability", "synchronizeLogicalDecoding") != true ||
				get(cluster, "spec", "replicationSlots", "highAvailability", "enabled") == false {
				t.Error("the Cluster does not synchronize logical slots to its standbys")
			}
			for _, p := range []string{"sync_replication_slots", "hot_standby_feedback"} {
				if v := str(cluster, "spec", "postgresql", "parameters", p); v != "on" {
					t.Errorf("%s = %q, want on", p, v)
				}
			}
			cdc := named(docs, "Deployment", "cdc")
			env, _, _, _ := containerEnv(t, cdc)
			if v := env["PAYSCHED_SLOT_FAILOVER"]; v != "" && v != "true" {
				t.Errorf("cdc runs with PAYSCHED_SLOT_FAILOVER=%s", v)
			}
			if name := str(cluster, "metadata", "name"); !strings.Contains(env["PAYSCHED_DATABASE_URL"], "@"+name+"-rw:") {
				t.Errorf("cdc does not stream from the primary (%s-rw): a standby's synchronized slot cannot be decoded", name)
			}
			queries := list(cluster, "spec", "monitoring", "customQueriesConfigMap")
			if len(queries) != 1 {
				t.Fatalf("customQueriesConfigMap: %v, want the slot queries", queries)
			}
			cm := named(docs, "ConfigMap", str(queries[0], "name"))
			if cm == nil || str(cm, "data", str(queries[0], "key")) == "" {
				t.Errorf("the Cluster's custom queries %v are not rendered", queries[0])
			}
			scraped := false
			for _, pm := range byKind(docs, "PodMonitor") {
				if str(pm, "spec", "selector", "matchLabels", "cnpg.io/cluster") == str(cluster, "metadata", "name") {
					scraped = true
				}
			}
			if !scraped {
				t.Error("no PodMonitor scrapes the Postgres instances' exporter")
			}
		})
	}
}

// TestAcknowledgedWritesAreReplicated: on every cluster with standbys
// (prod), every commit waits for at least one of them (synchronous
// replication, data durability required, synchronous_commit not weakened),
// so a failover keeps every create, cancel and outcome already answered,
// and every endpoint created and delivery recorded; a single instance
// (dev) has none to wait for and must not be told to.
func TestAcknowledgedWritesAreReplicated(t *testing.T) {
	for _, overlay := range []string{"dev", "prod"} {
		t.Run(overlay, func(t *testing.T) {
			eachPGCluster(t, render(t, overlay), checkReplicated)
		})
	}
}

func checkReplicated(t *testing.T, cluster obj) {
	instances, _ := num(cluster, "spec", "instances")
	sync, _ := get(cluster, "spec", "postgresql", "synchronous").(map[string]any)
	if instances < 2 {
		if sync != nil {
			t.Fatalf("%v instance(s) with synchronous replication %v: every write would wait forever", instances, sync)
		}
		return
	}
	if sync == nil {
		t.Fatal("no synchronous replication: a failover can lose acknowledged writes")
	}
	number, _ := num(sync, "number")
	if m := sync["method"]; (m != "any" && m != "first") || number < 1 || number > instances-1 {
		t.Errorf("synchronous %v: want method any or first, number between 1 and %v", sync, instances-1)
	}
	if sync["dataDurability"] != "required" {
		t.Errorf("dataDurability %v: with 'preferred' the primary commits alone when no standby answers", sync["dataDurability"])
	}
	if v := str(cluster, "spec", "postgresql", "parameters", "synchronous_commit"); v == "off" || v == "local" {
		t.Errorf("synchronous_commit = %s does not wait for the standby", v)
	}
}
