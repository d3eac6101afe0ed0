package dbroles

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/paysched/paysched/pkg/payment"
)

// TestTheAdminRoleMovesOnlyThroughAnApprovedRequest (0026): the admin
// role's direct UPDATE of a guarded move is refused, and so is one naming
// a request that is not running, expired, unapproved, of another action,
// or pinned to another payment or attempt; one naming a running request a
// second identity approved, pinned to that payment at its attempt, goes
// through. Tenant limits likewise: only in the transaction applying an
// approved request.
func TestTheAdminRoleMovesOnlyThroughAnApprovedRequest(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dead, held, pending := e.seedAs(t, payment.DeadLettered, true), e.seedAs(t, payment.Held, false), e.seedAs(t, payment.Pending, false)
	other := e.seedAs(t, payment.DeadLettered, true)
	redrive := fmt.Sprintf(`UPDATE payments SET status = 'PENDING', probe_first = true, run_at = now() WHERE id = '%s'`, dead)
	// Without a request: every operator move.
	for _, stmt := range []string{
		redrive,
		fmt.Sprintf(`UPDATE payments SET status = 'FAILED' WHERE id = '%s'`, dead),
		fmt.Sprintf(`UPDATE payments SET status = 'CANCELLED' WHERE id = '%s'`, dead),
		fmt.Sprintf(`UPDATE payments SET status = 'PENDING' WHERE id = '%s'`, held),
		fmt.Sprintf(`UPDATE payments SET status = 'CANCELLED' WHERE id = '%s'`, held),
		fmt.Sprintf(`UPDATE payments SET run_at = run_at + interval '1 hour' WHERE id = '%s'`, held),
		fmt.Sprintf(`UPDATE payments SET status = 'HELD' WHERE id = '%s'`, pending),
		fmt.Sprintf(`UPDATE payments SET status = 'CANCELLED' WHERE id = '%s'`, pending),
		fmt.Sprintf(`UPDATE payments SET run_at = now() + interval '1 hour' WHERE id = '%s'`, pending),
		`INSERT INTO tenant_limits (tenant, weight, updated_by) VALUES ('acme', 1000, 'admin:mallory')`,
	} {
		t.Run("no request/"+stmt, func(t *testing.T) { e.refused(t, "paysched_admin", stmt) })
	}
	// request inserts a request (as the owner) on ids pinned at attempts.
	request := func(action, state string, ids []uuid.UUID, attempts []int, decided bool, expired bool) int64 {
		t.Helper()
		by, name := any(nil), any(nil)
		if decided {
			by, name = "idp#bea", "bea"
		}
		var id int64
		if err := e.admin.QueryRow(ctx, `INSERT INTO console_requests (action, ids, attempts, reason, requested_by, requested_name,
			needs_approval, state, decided_by, decided_name, decided_at, expires_at)
			VALUES ($1, $2, $3, 'test', 'idp#ada', 'ada', true, $4, $5::text, $6::text, CASE WHEN $5::text IS NOT NULL THEN now() END,
			        CASE WHEN $7 THEN now() - interval '1 second' ELSE now() + interval '1 hour' END) RETURNING id`,
			action, ids, attempts, state, by, name, expired).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	under := func(req int64, stmt string) string {
		return fmt.Sprintf(`SELECT set_config('paysched.request', '%d', true); %s`, req, stmt)
	}
	for name, req := range map[string]int64{
		"awaiting approval":     request("REDRIVE", "AWAITING_APPROVAL", []uuid.UUID{dead}, []int{1}, false, false),
		"approved, not running": request("REDRIVE", "APPROVED", []uuid.UUID{dead}, []int{1}, true, false),
		"done":                  request("REDRIVE", "DONE", []uuid.UUID{dead}, []int{1}, true, false),
		"expired":               request("REDRIVE", "RUNNING", []uuid.UUID{dead}, []int{1}, true, true),
		"another action":        request("RESOLVE", "RUNNING", []uuid.UUID{dead}, []int{1}, true, false),
		"another payment":       request("REDRIVE", "RUNNING", []uuid.UUID{other}, []int{1}, true, false),
		"another attempt":       request("REDRIVE", "RUNNING", []uuid.UUID{dead}, []int{2}, true, false),
	} {
		t.Run("refused/"+name, func(t *testing.T) { e.refused(t, "paysched_admin", under(req, redrive)) })
	}
	t.Run("not a number", func(t *testing.T) {
		e.refused(t, "paysched_admin", `SELECT set_config('paysched.request', '1 OR true', true); `+redrive)
	})
	t.Run("allowed", func(t *testing.T) {
		req := request("REDRIVE", "RUNNING", []uuid.UUID{other, dead}, []int{1, 1}, true, false)
		tx, err := e.pools["paysched_admin"].Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		if _, err := tx.Exec(ctx, `SELECT set_config('paysched.request', $1, true)`, fmt.Sprint(req)); err != nil {
			t.Fatal(err)
		}
		if tag, err := tx.Exec(ctx, redrive); err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("redrive under an approved, running request: %v (%d rows)", err, tag.RowsAffected())
		}
	})
	// A limit change: only with the request applied by a second identity
	// in this transaction, for these values.
	var lim int64
	if err := e.admin.QueryRow(ctx, `INSERT INTO tenant_limit_requests (tenant, weight, reason, requested_by, requested_name)
		VALUES ('acme', 7, 'test', 'idp#ada', 'ada') RETURNING id`).Scan(&lim); err != nil {
		t.Fatal(err)
	}
	apply := fmt.Sprintf(`UPDATE tenant_limit_requests SET state = 'APPLIED', decided_by = 'idp#bea', decided_name = 'bea', decided_at = now() WHERE id = %d;
		SELECT set_config('paysched.limit_request', '%d', true);`, lim, lim)
	t.Run("limits for other values", func(t *testing.T) {
		e.refused(t, "paysched_admin", apply+`INSERT INTO tenant_limits (tenant, weight, updated_by) VALUES ('acme', 1000, 'admin:ada')`)
	})
	t.Run("limits allowed", func(t *testing.T) {
		if _, err := e.pools["paysched_admin"].Exec(ctx, apply+`INSERT INTO tenant_limits (tenant, weight, updated_by) VALUES ('acme', 7, 'admin:ada')`); err != nil {
			t.Fatalf("apply an approved limit request: %v", err)
		}
	})
}
