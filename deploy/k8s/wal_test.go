package k8s_test

import (
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

// TestSlotCannotFillTheWALVolume: max_slot_wal_keep_size leaves a quarter
// of the volume that holds WAL for everything else, so a stuck slot is
// invalidated (and alerted on) before the disk fills and stops the primary.
func TestSlotCannotFillTheWALVolume(t *testing.T) {
	for _, overlay := range []string{"dev", "prod"} {
		t.Run(overlay, func(t *testing.T) {
			docs := render(t, overlay)
			var cluster obj
			for _, c := range byKind(docs, "Cluster") {
				if strings.HasPrefix(str(c, "apiVersion"), "postgresql.cnpg.io/") {
					cluster = c
				}
			}
			if cluster == nil {
				t.Fatal("no CloudNativePG Cluster")
			}
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
	}
}
