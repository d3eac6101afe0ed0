package pgtally_test

import (
	"context"
	"maps"
	"testing"

	"github.com/paysched/paysched/test/pgtest"
	"github.com/paysched/paysched/tools/internal/pgtally"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestByKey(t *testing.T) {
	db := pgtest.NewPool(t)
	ctx := context.Background()
	// A key seen twice keeps its last number (the callers' queries give
	// one row a key; the order here makes "last" well defined).
	got, err := pgtally.ByKey(ctx, db, `SELECT k, n::bigint FROM (VALUES ('a', 1), ('b', 2), ('a', 3), ('c', 0)) v(k, n)
		WHERE n >= $1 ORDER BY n`, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"a": 3, "b": 2}; !maps.Equal(got, want) {
		t.Errorf("ByKey = %v, want %v", got, want)
	}
	none, err := pgtally.ByKey(ctx, db, `SELECT 'x', 1::bigint WHERE false`)
	if err != nil || none == nil || len(none) != 0 {
		t.Errorf("ByKey of no rows = %v, %v; want an empty map", none, err)
	}
	if _, err := pgtally.ByKey(ctx, db, `SELECT 'x', 'not a number'`); err == nil {
		t.Error("ByKey of a text number: no error")
	}
}
