package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/events/envelope"
	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/events/notification"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/reconcile"
	"github.com/paysched/paysched/tools/internal/pgtally"
)

// check waits for the system to settle, reconciles, and verifies every
// invariant, filling r.res.
func (r *run) check(ctx context.Context, w *workload, t0 time.Time) {
	r.settle(ctx)
	r.reconcile(ctx, w, t0)
	r.checkStatuses(ctx)
	r.checkBooks(ctx, w)
	r.checkAudit(ctx)
	r.quiesce(ctx)
	r.checkStream(ctx)
	r.checkWebhooks(ctx, r.notified)
	r.checkPlans(ctx)
}

// quiesce stops every process that changes the schedule's rows (the
// engine, the APIs, the reconciler and its resolver) and waits until cdc
// has streamed all they wrote: the stream and webhook checks compare what
// Kafka holds with the rows as they are, so the rows must not move in
// between. A dead letter the resolver settled after the payments had
// settled once did, and read as a lost event.
func (r *run) quiesce(ctx context.Context) {
	for _, p := range r.procs {
		switch p.tier {
		case "sweeper", "executor", "reaper", "payments-api", "admin-api", "reconciler":
			p.signal(syscall.SIGTERM, 20*time.Second)
		}
	}
	var lsn string
	if err := r.db.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		r.violation("quiesce: the WAL position: %v", err)
		return
	}
	// cdc confirms a position once Kafka holds what came before it (its
	// heartbeats move it on when nothing else changes).
	deadline := time.Now().Add(time.Minute)
	for {
		var streamed bool
		err := r.db.QueryRow(ctx, `SELECT coalesce(bool_and(confirmed_flush_lsn >= $1::pg_lsn), false)
			FROM pg_replication_slots WHERE slot_name = 'paysched_cdc'`, lsn).Scan(&streamed)
		if err == nil && streamed {
			return
		}
		if time.Now().After(deadline) {
			r.violation("quiesce: cdc has not confirmed %s a minute after the writers stopped (%v)", lsn, err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// count runs a count query, retrying through a restarting database.
func (r *run) count(ctx context.Context, sql string, args ...any) int {
	return r.countIn(ctx, r.db, sql, args...)
}

// countIn is count on db.
func (r *run) countIn(ctx context.Context, db *pgxpool.Pool, sql string, args ...any) int {
	var n int
	var err error
	for try := 0; try < 30; try++ {
		if err = db.QueryRow(ctx, sql, args...).Scan(&n); err == nil {
			return n
		}
		time.Sleep(time.Second)
	}
	r.violation("query %q: %v", sql, err)
	return -1
}

// settle waits until no payment is PENDING or PROCESSING and no attempt is
// unfinished (the reaper closes orphans), bounded by cfg.Settle.
func (r *run) settle(ctx context.Context) {
	start := time.Now()
	for {
		open := r.count(ctx, `SELECT count(*) FROM payments WHERE status = ANY($1)`, payment.Names(payment.Pending, payment.Processing))
		unfinished := r.count(ctx, `SELECT count(*) FROM payment_attempts WHERE finished_at IS NULL`)
		if open == 0 && unfinished == 0 {
			r.logf("settled %.0fs after the chaos", time.Since(start).Seconds())
			return
		}
		if time.Since(start) > r.cfg.Settle {
			r.logf("not settled after %s: %d open payments, %d unfinished attempts", r.cfg.Settle, open, unfinished)
			return
		}
		time.Sleep(time.Second)
	}
}

// reconcile runs the reconciliation of every day the run touched, as an
// operator would after an incident: charges whose payment is not COMPLETED
// are repaired from gateway truth, anything else is a finding.
func (r *run) reconcile(ctx context.Context, w *workload, t0 time.Time) {
	for day := reconcile.Day(t0.Add(-r.cfg.Lead)); !day.After(time.Now()); day = day.AddDate(0, 0, 1) {
		var resp *payschedv1.TriggerReconciliationRunResponse
		err := retry(ctx, time.Now().Add(time.Minute), func(c context.Context) error {
			var err error
			c, cancel := context.WithTimeout(c, 2*time.Minute)
			defer cancel()
			resp, err = r.admin.TriggerReconciliationRun(w.admin(c), &payschedv1.TriggerReconciliationRunRequest{Day: day.Format(time.DateOnly)})
			return err
		})
		if err != nil {
			r.violation("reconciliation of %s: %v", day.Format(time.DateOnly), err)
			continue
		}
		run := resp.GetRun()
		r.logf("reconciliation %s: %s, %d charges, %d repaired, %d mismatches", run.GetDay(), run.GetState(),
			run.GetCharges(), run.GetRepaired(), run.GetMismatches())
		for _, it := range run.GetItems() {
			// A repair of a payment answered FAILED or CANCELLED ("not
			// charged") is CRITICAL: the engine said so of a charged one.
			if it.GetKind() != reconcile.KindRepaired || it.GetSeverity() == "CRITICAL" {
				r.violation("reconciliation: %s %s payment=%s %s", it.GetSeverity(), it.GetKind(), it.GetPaymentId(), it.GetDetail())
			}
		}
	}
}

// checkStatuses: every payment terminal, or dead-lettered with a reason.
func (r *run) checkStatuses(ctx context.Context) {
	rows, err := r.db.Query(ctx, `SELECT status, count(*) FROM payments GROUP BY 1 ORDER BY 1`)
	if err != nil {
		r.violation("statuses: %v", err)
		return
	}
	var parts []string
	for rows.Next() {
		var s string
		var n int
		_ = rows.Scan(&s, &n)
		parts = append(parts, fmt.Sprintf("%s=%d", s, n))
	}
	rows.Close()
	r.logf("final statuses: %s", strings.Join(parts, " "))
	r.res.Stuck = r.count(ctx, `SELECT count(*) FROM payments WHERE status = ANY($1)
		OR (status = $2 AND dead_letter_reason IS NULL)`, payment.Names(payment.Pending, payment.Processing, payment.Held), string(payment.DeadLettered))
	if r.res.Stuck > 0 {
		r.violation("%d payments stuck (not terminal, not dead-lettered with a reason)", r.res.Stuck)
		// What each looks like, and where its tenant stands in the sweepers'
		// queue: enough to tell a lost wakeup from a slow retry.
		rows, err := r.db.Query(ctx, `SELECT p.id, p.status, p.tenant, p.attempt, p.run_at, p.probe_first, p.lease_until,
			q.next_at, (SELECT count(*) FROM tenant_wakeups w WHERE w.tenant = p.tenant), now()
			FROM payments p LEFT JOIN tenant_queue q USING (tenant)
			WHERE p.status = ANY($1) LIMIT 20`, payment.Names(payment.Pending, payment.Processing, payment.Held))
		if err == nil {
			for rows.Next() {
				var id, st, tenant string
				var attempt int
				var runAt, now time.Time
				var probe bool
				var lease, next *time.Time
				var wakeups int
				if rows.Scan(&id, &st, &tenant, &attempt, &runAt, &probe, &lease, &next, &wakeups, &now) == nil {
					r.logf("stuck: %s %s tenant=%s attempt=%d run_at=%s probe_first=%v lease_until=%v queue_next_at=%v wakeups=%d now=%s",
						id, st, tenant, attempt, runAt.Format(time.RFC3339Nano), probe, lease, next, wakeups, now.Format(time.RFC3339Nano))
				}
			}
			rows.Close()
		}
	}
	// The schedules' occurrences are checkPlans's.
	if n := r.count(ctx, `SELECT count(*) FROM payments WHERE schedule_id IS NULL`); n != r.cfg.Payments {
		r.violation("%d payments exist, %d were scheduled", n, r.cfg.Payments)
	}
}

// checkBooks: the gateway's ledger against the payments, per payment.
func (r *run) checkBooks(ctx context.Context, w *workload) {
	rep, err := r.gwAdm.Report(ctx, &gatewayv1.ReportRequest{})
	if err != nil {
		r.violation("gateway report: %v", err)
		return
	}
	r.res.DoubleCharged = len(rep.GetDoubleCharged())
	r.logf("charges the gateway made after their caller gave up (--late-record): %d", rep.GetLateRecords())
	// Succeeded charges: a processing one counts once its time is up.
	charged, err := pgtally.ByKey(ctx, r.gwDB, `SELECT reference, amount FROM gateway_charges
		WHERE NOT declined AND (pending = '' OR (pending = 'processing' AND decide_at <= now()))`)
	if err != nil {
		r.violation("gateway ledger: %v", err)
		return
	}
	// Every charge that waited for authentication was cancelled by the
	// engine once past its bound: none is left undecided.
	r.logf("failed awaiting authentication (cancelled at the gateway): %d",
		r.count(ctx, `SELECT count(*) FROM payments WHERE failure_reason = 'AUTHENTICATION_REQUIRED'`))
	undecided, err := pgtally.ByKey(ctx, r.gwDB, `SELECT reference, amount FROM gateway_charges WHERE NOT declined AND pending = 'action_required'`)
	if err != nil {
		r.violation("gateway ledger: %v", err)
		return
	}
	for id := range undecided {
		r.violation("payment %s: its charge still waits for authentication at the gateway, long past the bound:\n%s", id, r.rows(ctx, id))
	}
	completed, err := pgtally.ByKey(ctx, r.db, `SELECT id::text, amount_minor FROM payments WHERE status = $1`, string(payment.Completed))
	if err != nil {
		r.violation("payments: %v", err)
		return
	}
	var differ []string
	for id, amount := range completed {
		if a, ok := charged[id]; !ok || a != amount {
			differ = append(differ, id)
		}
	}
	for id := range charged {
		if _, ok := completed[id]; !ok {
			differ = append(differ, id)
		}
	}
	sort.Strings(differ)
	r.logf("books: %d gateway charges, %d COMPLETED payments, %d differ", len(charged), len(completed), len(differ))
	for i, id := range differ {
		if i == 20 {
			r.violation("... and %d more payments whose books differ", len(differ)-20)
			break
		}
		r.violation("books differ for payment %s:\n%s", id, r.rows(ctx, id))
	}
	for _, id := range rep.GetDoubleCharged() {
		r.violation("double charged payment %s:\n%s", id, r.rows(ctx, id))
	}
	for id := range w.cancelled {
		if _, ok := charged[id]; ok {
			r.violation("payment %s was cancelled (200) and charged:\n%s", id, r.rows(ctx, id))
		}
	}
}

// checkAudit: every attempt has its audit rows (its start, and its outcome
// once finished), waiting for the pipeline to catch up. The attempts are
// the schedule's, the rows the audit log's database's: compared here.
func (r *run) checkAudit(ctx context.Context) {
	deadline := time.Now().Add(90 * time.Second)
	for {
		missing, rows, err := r.auditMissing(ctx)
		switch {
		case err == nil && missing == 0:
			r.logf("audit: every attempt and its outcome is in audit_events (%d rows)", rows)
			return
		case time.Now().After(deadline):
			r.violation("%d attempts lack their audit rows (%v)", missing, err)
			return
		}
		time.Sleep(time.Second)
	}
}

// auditMissing counts the attempts (and finished attempts' outcomes)
// without their row in audit_events, and the log's rows.
func (r *run) auditMissing(ctx context.Context) (missing, rows int, err error) {
	type key struct {
		id      string
		attempt int
		outcome string
	}
	want := map[key]bool{}
	if err := scan(ctx, r.db, `SELECT payment_id::text, attempt, COALESCE(outcome, '') FROM payment_attempts`, func(k key) { want[k] = true },
		func(k *key) []any { return []any{&k.id, &k.attempt, &k.outcome} }); err != nil {
		return -1, 0, err
	}
	have := map[key]bool{}
	if err := scan(ctx, r.auditDB, `SELECT payment_id::text, (event::json->'after'->>'attempt')::int, COALESCE(event::json->'after'->>'outcome', '')
		FROM audit_events WHERE table_name = 'payment_attempts'`, func(k key) {
		have[k] = true
		have[key{k.id, k.attempt, ""}] = true // the attempt's start is there too, as far as its first row goes
	}, func(k *key) []any { return []any{&k.id, &k.attempt, &k.outcome} }); err != nil {
		return -1, 0, err
	}
	for k := range want {
		if !have[k] {
			missing++
		}
	}
	if err := r.auditDB.QueryRow(ctx, `SELECT count(*) FROM audit_events`).Scan(&rows); err != nil {
		return missing, 0, err
	}
	return missing, rows, nil
}

// scan runs sql on db and hands each row, scanned into a fresh T, to each.
func scan[T any](ctx context.Context, db *pgxpool.Pool, sql string, each func(T), dests func(*T) []any) error {
	rows, err := db.Query(ctx, sql)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var v T
		if err := rows.Scan(dests(&v)...); err != nil {
			return err
		}
		each(v)
	}
	return rows.Err()
}

// checkStream reads back every change event and notification: per row, the
// events (deduplicated by LSN) must form an unbroken chain (each before
// image is the previous after image) from its creation to the row as it is
// now; per payment and terminal type, one notification ce_id per transition.
func (r *run) checkStream(ctx context.Context) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.addr(92)), kgo.ConsumeTopics(kafka.DefaultTopics.Payments, kafka.DefaultTopics.Attempts, kafka.DefaultTopics.Notifications),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(64<<20))
	if err != nil {
		r.violation("kafka: %v", err)
		return
	}
	defer cl.Close()
	type key struct{ topic, key string }
	events := map[key]map[int64]envelope.Change{}
	notes := map[string]map[string]bool{}         // payment|type -> ce_ids
	scheduleNotes := map[string]map[string]bool{} // schedule|type -> ce_ids
	r.notified = map[string]string{}
	dctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	kafka.Drain(dctx, cl, nil, func(rec *kgo.Record) {
		if rec.Topic == kafka.DefaultTopics.Notifications {
			id, typ := string(notification.Header(rec, notification.HeaderID)), string(notification.Header(rec, notification.HeaderType))
			k := string(rec.Key) + "|" + typ
			if strings.HasPrefix(typ, notification.ScheduleTypePrefix) {
				// A schedule's life, checked below: not a payment's.
				if scheduleNotes[k] == nil {
					scheduleNotes[k] = map[string]bool{}
				}
				scheduleNotes[k][id] = true
				r.notified[id] = string(rec.Key)
				return
			}
			if notes[k] == nil {
				notes[k] = map[string]bool{}
			}
			notes[k][id] = true
			r.notified[id] = string(rec.Key)
			return
		}
		e, err := envelope.DecodeChange(rec.Value)
		if err != nil {
			r.violation("undecodable event at %s/%d/%d", rec.Topic, rec.Partition, rec.Offset)
			return
		}
		k := key{rec.Topic, string(rec.Key)}
		if events[k] == nil {
			events[k] = map[int64]envelope.Change{}
		}
		events[k][e.Source.LSN] = e // a redelivery has the same LSN
	})
	r.checkScheduleNotes(scheduleNotes)
	now, err := r.currentRows(ctx)
	if err != nil {
		r.violation("current rows: %v", err)
		return
	}
	r.mu.Lock()
	resynced := r.resynced
	r.mu.Unlock()
	lost, snapshots := 0, 0
	var broken []string // a few of the chains found broken, for the post-mortem
	brokenAt := func(k string, byLSN map[int64]envelope.Change, lsns []int64, why string) {
		if len(broken) >= 5 {
			return
		}
		var chain []string
		for _, l := range lsns {
			e := byLSN[l]
			chain = append(chain, fmt.Sprintf("%s@%d %v/%v prev %v", e.Op, l, e.After["status"], e.After["attempt"], e.After["prev_status"]))
		}
		broken = append(broken, fmt.Sprintf("%s (%s): %s", k, why, strings.Join(chain, ", ")))
	}
	// payment|type -> the distinct transitions (a redelivery, or a resync's
	// snapshot of a move already captured, is the same transition: the same
	// attempt and time, which the notification's id is made of).
	transitions := map[string]map[string]bool{}
	transition := func(k, which string) {
		if transitions[k] == nil {
			transitions[k] = map[string]bool{}
		}
		transitions[k][which] = true
	}
	for k, byLSN := range events {
		lsns := make([]int64, 0, len(byLSN))
		for l := range byLSN {
			lsns = append(lsns, l)
		}
		sort.Slice(lsns, func(i, j int) bool { return lsns[i] < lsns[j] })
		first := byLSN[lsns[0]]
		switch {
		case first.Op == "c":
		case resynced && first.Op == "r":
			snapshots++ // made in the gap: its snapshot is its first event
		default:
			lost++ // its creation never arrived
			brokenAt(k.topic+"|"+k.key, byLSN, lsns, "no creation")
		}
		for i := 1; i < len(lsns); i++ {
			prev, cur := byLSN[lsns[i-1]], byLSN[lsns[i]]
			switch {
			case resynced && cur.Op == "r":
				// After a lost slot, the row as it was at the resync: the
				// changes in the gap are not in the stream one by one, and
				// the snapshot says so (op r).
				snapshots++
			case !follows(prev, cur):
				lost++ // a change between them is missing
				brokenAt(k.topic+"|"+k.key, byLSN, lsns, fmt.Sprintf("gap before %d", lsns[i]))
			}
		}
		last := byLSN[lsns[len(lsns)-1]]
		if want, ok := now[k.topic+"|"+k.key]; !ok || !sameRow(last.After, want) {
			lost++ // the row changed after its last event
			brokenAt(k.topic+"|"+k.key, byLSN, lsns, fmt.Sprintf("now %v", want))
		}
		delete(now, k.topic+"|"+k.key)
		if k.topic == kafka.DefaultTopics.Payments {
			for _, l := range lsns {
				e := byLSN[l]
				st, _ := e.After["status"].(string)
				id, _ := e.After["id"].(string)
				when := fmt.Sprint(e.After["attempt"], "|", e.After["updated_at"])
				switch {
				case e.Op == "c":
					transition(id+"|paysched.payment.created", "")
				case e.Op == "r" && payment.Status(st).AtRest():
					transition(id+"|paysched.payment."+strings.ToLower(st), when)
				case e.Op == "r":
					transition(id+"|paysched.payment.created", "")
				case payment.Status(st).AtRest() && left(e) != st:
					transition(id+"|paysched.payment."+strings.ToLower(st), when)
				}
			}
		}
	}
	if resynced {
		r.logf("stream: %d snapshot events after the resync stand for the changes in the gap", snapshots)
	}
	lost += len(now) // rows with no event at all
	r.res.LostEvents = lost
	if lost > 0 {
		r.violation("%d row changes missing from Kafka (%d rows never seen); e.g. %s", lost, len(now), strings.Join(broken, "; "))
	}
	wrong := 0
	for k, n := range transitions {
		if len(notes[k]) != len(n) {
			wrong++
		}
		delete(notes, k)
	}
	wrong += len(notes)
	r.logf("stream: %d rows' changes read back, %d notification kinds per payment checked", len(events), len(transitions))
	if wrong > 0 {
		r.violation("%d (payment, type) pairs without exactly one notification per transition", wrong)
	}
}

// currentRows renders every captured row as the connector does (through
// to_jsonb, so numbers and strings compare by value), keyed like the events.
func (r *run) currentRows(ctx context.Context) (map[string]map[string]any, error) {
	out := map[string]map[string]any{}
	for _, q := range []struct{ topic, sql string }{
		{kafka.DefaultTopics.Payments, `SELECT jsonb_build_object('id', id)::text, jsonb_build_object('status', status, 'attempt', attempt, 'retries', retries)::text FROM payments`},
		{kafka.DefaultTopics.Attempts, `SELECT jsonb_build_object('payment_id', payment_id, 'attempt', attempt)::text, jsonb_build_object('outcome', outcome, 'attempt', attempt)::text FROM payment_attempts`},
	} {
		rows, err := r.db.Query(ctx, q.sql)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				rows.Close()
				return nil, err
			}
			var m map[string]any
			_ = json.Unmarshal([]byte(v), &m)
			out[q.topic+"|"+canonicalKey(k)] = m
		}
		rows.Close()
	}
	return out, nil
}

// canonicalKey re-encodes a JSON key the way the connector writes it
// (fields in table order, no spaces).
func canonicalKey(k string) string {
	var m map[string]any
	_ = json.Unmarshal([]byte(k), &m)
	if id, ok := m["id"]; ok {
		return fmt.Sprintf(`{"id":%q}`, id)
	}
	return fmt.Sprintf(`{"payment_id":%q,"attempt":%v}`, m["payment_id"], m["attempt"])
}

// sameRow compares want's fields with got's (want may be a subset).
// follows says whether cur is the change right after prev, of one row.
// With a before image (payment_attempts, REPLICA IDENTITY FULL) the image
// is prev's after image. Without one (payments: REPLICA IDENTITY DEFAULT,
// schema 15), cur's prev_status is prev's status, and the attempt is
// prev's, one more for a claim: a claim is the only change of attempt, so
// a lost cycle of retry and claim shows.
func follows(prev, cur envelope.Change) bool {
	if cur.Before != nil {
		return sameRow(prev.After, cur.Before)
	}
	if prev.After == nil || cur.After == nil {
		return false
	}
	was, ok := cur.After["prev_status"].(string)
	if !ok || was != prev.After["status"] {
		return false
	}
	pa, _ := prev.After["attempt"].(float64)
	ca, _ := cur.After["attempt"].(float64)
	if cur.After["status"] == string(payment.Processing) && was == string(payment.Pending) {
		pa++
	}
	return ca == pa
}

// left is the status a payments change left: its before image's, else
// its prev_status ("" when neither says).
func left(e envelope.Change) string {
	if e.Before != nil {
		s, _ := e.Before["status"].(string)
		return s
	}
	s, _ := e.After["prev_status"].(string)
	return s
}

func sameRow(got, want map[string]any) bool {
	if got == nil || want == nil {
		return got == nil && want == nil
	}
	for k, v := range want {
		a, _ := json.Marshal(got[k])
		b, _ := json.Marshal(v)
		if !bytes.Equal(a, b) {
			return false
		}
	}
	return true
}

// rows renders what the databases hold about payment id: its row, its
// attempts, its actions and the gateway's charges, for a violation report.
func (r *run) rows(ctx context.Context, id string) string {
	var b strings.Builder
	dump := func(db *pgxpool.Pool, title, sql string) {
		rows, err := db.Query(ctx, sql, id)
		if err != nil {
			fmt.Fprintf(&b, "  %s: %v\n", title, err)
			return
		}
		defer rows.Close()
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err == nil {
				fmt.Fprintf(&b, "  %s: %s\n", title, line)
			}
		}
	}
	dump(r.db, "payment", `SELECT row_to_json(p)::text FROM (SELECT id, status, attempt, retries, probe_first, dead_letter_reason,
		gateway_ref, last_error, due_time, run_at, updated_at FROM payments WHERE id = $1::uuid) p`)
	dump(r.db, "attempt", `SELECT row_to_json(a)::text FROM payment_attempts a WHERE payment_id = $1::uuid ORDER BY attempt`)
	dump(r.db, "action", `SELECT row_to_json(a)::text FROM payment_actions a WHERE payment_id = $1::uuid ORDER BY id`)
	dump(r.gwDB, "gateway", `SELECT row_to_json(c)::text FROM gateway_charges c WHERE reference = $1 ORDER BY created_at`)
	return b.String()
}

// checkScheduleNotes: every schedule of the run was announced created
// once and, cancelled at the end, cancelled once; no event of a schedule
// was announced under two ids.
func (r *run) checkScheduleNotes(notes map[string]map[string]bool) {
	created, cancelled, twice := 0, 0, 0
	for _, p := range r.plans {
		if len(notes[p.id+"|"+notification.ScheduleTypePrefix+"created"]) == 1 {
			created++
		}
		if len(notes[p.id+"|"+notification.ScheduleTypePrefix+"cancelled"]) == 1 {
			cancelled++
		}
	}
	for _, ids := range notes {
		if len(ids) > 1 {
			twice++
		}
	}
	r.logf("schedules: %d of %d announced created once, %d cancelled once; %d events announced under two ids", created, len(r.plans), cancelled, twice)
	if created != len(r.plans) || cancelled != len(r.plans) || twice > 0 {
		r.violation("schedule notifications: %d created, %d cancelled of %d schedules; %d events under two ids", created, cancelled, len(r.plans), twice)
	}
}
