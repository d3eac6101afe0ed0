package dbroles

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
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
			needs_approval, state, decided_by, decided_name, decided_at, expires_at, run_at)
			VALUES ($1, $2, $3, 'test', 'idp#ada', 'ada', true, $4, $5::text, $6::text, CASE WHEN $5::text IS NOT NULL THEN now() END,
			        CASE WHEN $7 THEN now() - interval '1 second' ELSE now() + interval '1 hour' END,
			        CASE WHEN $1 = 'RESCHEDULE' THEN now() + interval '1 hour' END) RETURNING id`,
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
	// A reschedule through the store, as admin-api makes it: the move and
	// its payment_actions row (the status unchanged) under a running,
	// approved RESCHEDULE request.
	t.Run("reschedule allowed", func(t *testing.T) {
		req := request("RESCHEDULE", "RUNNING", []uuid.UUID{held}, []int{1}, true, false)
		_, err := store.ApplyReschedule(ctx, e.pools["paysched_admin"], store.Reschedule{ID: held, From: []payment.Status{payment.Held},
			Attempt: 1, RunAt: time.Now().Add(time.Hour), Actor: "admin:ada", Action: "RESCHEDULE", Reason: "test", Request: req})
		if err != nil {
			t.Fatalf("reschedule under an approved request: %v", err)
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

// TestARequestsLifeIsAudited (0028): a request, its approval, its
// rejection and its expiry each write a payment_actions row per payment
// (and so reach the audit log) naming both identities, whoever changes the
// request; the admin role cannot write such a row itself.
func TestARequestsLifeIsAudited(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, b := e.seedAs(t, payment.DeadLettered, true), e.seedAs(t, payment.DeadLettered, true)
	adm := e.pools["paysched_admin"]
	var req int64
	if err := adm.QueryRow(ctx, `INSERT INTO console_requests (action, ids, attempts, reason, requested_by, requested_name, needs_approval, state)
		VALUES ('REDRIVE', ARRAY[$1::uuid, $2::uuid], ARRAY[1, 1], 'psp back', 'idp#ada', 'ada', true, 'AWAITING_APPROVAL') RETURNING id`, a, b).Scan(&req); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.Exec(ctx, `UPDATE console_requests SET state = 'APPROVED', decided_by = 'idp#bea', decided_name = 'bea', decided_at = now()
		WHERE id = $1`, req); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		action, actor, reason string
	}{
		{"REQUEST_REQUESTED", "admin:ada", fmt.Sprintf("request #%d (REDRIVE via console) requested: requested by ada (idp#ada); psp back", req)},
		{"REQUEST_APPROVED", "admin:bea", fmt.Sprintf("request #%d (REDRIVE via console) approved: requested by ada (idp#ada), decided by bea (idp#bea); psp back", req)},
	} {
		var n int
		if err := e.admin.QueryRow(ctx, `SELECT count(*) FROM payment_actions WHERE payment_id = ANY($1) AND action = $2 AND actor = $3
			AND reason = $4 AND prev_status = 'DEAD_LETTERED' AND new_status = 'DEAD_LETTERED'`,
			[]uuid.UUID{a, b}, c.action, c.actor, c.reason).Scan(&n); err != nil || n != 2 {
			t.Fatalf("%s rows: %d %v, want one per payment", c.action, n, err)
		}
	}
	e.refused(t, "paysched_admin", fmt.Sprintf(`INSERT INTO payment_actions (payment_id, actor, action, prev_status, new_status, reason)
		VALUES ('%s', 'admin:mallory', 'REQUEST_APPROVED', 'DEAD_LETTERED', 'DEAD_LETTERED', 'forged')`, a))
}
