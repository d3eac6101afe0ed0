package tenanthook

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paysched/paysched/test/pgtest"
)

// An endpoint's limits are 0 (the default) or within what the dispatcher
// honours: a rate under 1 a second would park its slots on the endpoint.
func TestCheckLimits(t *testing.T) {
	for _, c := range []struct {
		inflight  int
		perSecond float64
		// refused is what the error names ("": accepted).
		refused string
	}{
		{0, 0, ""},
		{1, 1, ""},
		{64, 10000, ""},
		{4, 2.5, ""},
		{-1, 0, "in flight"},
		{65, 0, "in flight"},
		{0, 0.001, "per second"},
		{0, 0.999, "per second"},
		{0, -1, "per second"},
		{0, 10000.5, "per second"},
		{0, math.NaN(), "per second"},
		{0, math.Inf(1), "per second"},
	} {
		e := Endpoint{URL: "https://hooks.example.com/x", MaxInflight: c.inflight, MaxPerSecond: c.perSecond}
		err := e.Check(false)
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("in flight %d, per second %g: %v, want accepted", c.inflight, c.perSecond, err)
		case c.refused != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("in flight %d, per second %g: %v, want %v naming %q", c.inflight, c.perSecond, err, ErrInvalid, c.refused)
		}
	}
}

// A tenant has at most MaxEndpointsPerTenant endpoints, however many
// creates arrive at once; another tenant's are not counted.
func TestEndpointsPerTenantCapUnderConcurrency(t *testing.T) {
	db := pgtest.NewPool(t)
	ctx := context.Background()
	if _, _, err := CreateEndpoint(ctx, db, Endpoint{Tenant: "globex", URL: "https://hooks.globex.example/"}); err != nil {
		t.Fatal(err)
	}
	// Rounds of 20 creates for one tenant, on connections already open:
	// dialling would space them out and hide a race.
	const rounds, n = 3, MaxEndpointsPerTenant + 4
	conns := make([]*pgxpool.Conn, 0, n)
	for range n {
		c, err := db.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	for r := range rounds {
		tenant := fmt.Sprintf("acme-%d", r)
		var wg sync.WaitGroup
		errs := make([]error, n)
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, _, errs[i] = CreateEndpoint(ctx, db, Endpoint{Tenant: tenant, URL: fmt.Sprintf("https://hooks.acme.example/%d", i)})
			}()
		}
		close(start)
		wg.Wait()
		created, refused := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				created++
			case errors.Is(err, ErrTooManyEndpoints):
				refused++
			default:
				t.Errorf("create: %v", err)
			}
		}
		var stored int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM webhook_endpoints WHERE tenant = $1`, tenant).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if created != MaxEndpointsPerTenant || refused != n-MaxEndpointsPerTenant || stored != MaxEndpointsPerTenant {
			t.Fatalf("%s: %d created, %d refused, %d stored; want %d, %d, %d", tenant, created, refused, stored,
				MaxEndpointsPerTenant, n-MaxEndpointsPerTenant, MaxEndpointsPerTenant)
		}
	}
	// The cap is the tenant's: globex, with one, may add more.
	if _, _, err := CreateEndpoint(ctx, db, Endpoint{Tenant: "globex", URL: "https://hooks.globex.example/2"}); err != nil {
		t.Fatalf("another tenant refused: %v", err)
	}
}
