package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/events/audit"
	"github.com/paysched/paysched/pkg/events/envelope"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
)

// pageTimeout bounds every page's statements.
const pageTimeout = 5 * time.Second

func (c *Console) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), pageTimeout)
}

// dbFail answers a database failure: logged with context, a plain message.
func (c *Console) dbFail(w http.ResponseWriter, r *http.Request, v *view, what string, err error) {
	c.log.Error("console: "+what, "path", r.URL.Path, "err", err)
	c.fail(w, r, v, http.StatusServiceUnavailable, "The database did not answer in time ("+what+"). Try again in a moment.")
}

// ---- overview

type overviewData struct {
	Counts     []StatusCount
	CountsAge  string
	Lateness   any
	Executed   any
	LastRate   float64
	LastP99    float64
	CDC        []cdcSlot
	Heartbeats []heartbeat
	Buckets    []bucket
	Forecast   []currencyForecast
	ForecastAt string
}

type cdcSlot struct {
	Slot      string
	Active    bool
	BehindMB  float64
	Confirmed string
}

type heartbeat struct {
	Process     string
	Age         string
	Stale       bool
	BreakerOpen bool
	Executors   []struct {
		Addr     string `json:"addr"`
		Admitted bool   `json:"admitted"`
		Free     int64  `json:"free"`
		Streams  int32  `json:"streams"`
	}
}

type bucket struct {
	Name   string
	Tokens float64
	Age    string
}

type currencyForecast struct {
	Currency  string
	Count     int64
	Amount    int64
	PeakAt    time.Time
	PeakCount int64
	Chart     any
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, v *view) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	snap := c.cache.snapshot()
	now := c.now()
	d := overviewData{Counts: snap.Counts}
	if !snap.CountsAt.IsZero() {
		d.CountsAge = ago(now, snap.CountsAt)
	}
	var xs []time.Time
	var p50, p99, rate []float64
	for _, s := range snap.Samples {
		xs = append(xs, s.At)
		p50, p99 = append(p50, s.LatenessP50), append(p99, s.LatenessP99)
		rate = append(rate, float64(s.Executed)/s.Seconds)
	}
	if n := len(snap.Samples); n > 0 {
		d.LastRate, d.LastP99 = rate[n-1], p99[n-1]
	}
	from := now.Add(-history)
	d.Lateness = lineChart("Lateness of first attempts, last hour (seconds)", "s", from, now,
		[]series{{Name: "p50", Class: "s1", X: xs, Y: p50}, {Name: "p99", Class: "s2", X: xs, Y: p99}})
	d.Executed = lineChart("Executed per second, last hour", "", from, now, []series{{Name: "executed/s", Class: "s3", X: xs, Y: rate}})
	var err error
	if d.CDC, err = c.cdcSlots(ctx); err != nil {
		c.dbFail(w, r, v, "CDC slots", err)
		return
	}
	if d.Heartbeats, err = c.heartbeats(ctx, now); err != nil {
		c.dbFail(w, r, v, "engine heartbeats", err)
		return
	}
	if d.Buckets, err = c.buckets(ctx, now); err != nil {
		c.dbFail(w, r, v, "rate buckets", err)
		return
	}
	d.Forecast = forecastByCurrency(snap.Forecast, now)
	if !snap.ForecastAt.IsZero() {
		d.ForecastAt = ago(now, snap.ForecastAt)
	}
	v.Title, v.Data, v.Live = "Overview", d, 10
	c.render(w, http.StatusOK, "overview.html", v)
}

func forecastByCurrency(ps []ForecastPoint, now time.Time) []currencyForecast {
	by := map[string]*currencyForecast{}
	xs := map[string][]time.Time{}
	ys := map[string][]float64{}
	for _, p := range ps {
		f := by[p.Currency]
		if f == nil {
			f = &currencyForecast{Currency: p.Currency}
			by[p.Currency] = f
		}
		f.Count += p.Count
		f.Amount += p.Amount
		if p.Count > f.PeakCount {
			f.PeakCount, f.PeakAt = p.Count, p.Minute
		}
		xs[p.Currency] = append(xs[p.Currency], p.Minute)
		ys[p.Currency] = append(ys[p.Currency], float64(p.Count))
	}
	var out []currencyForecast
	for cur, f := range by {
		f.Chart = barChart("Payments due per minute, next 24 h, "+cur, now.Truncate(time.Minute), now.Add(24*time.Hour), xs[cur], ys[cur])
		out = append(out, *f)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Amount > out[j].Amount || out[i].Amount == out[j].Amount && out[i].Currency < out[j].Currency
	})
	if len(out) > 8 {
		out = out[:8]
	}
	return out
}

func (c *Console) cdcSlots(ctx context.Context) ([]cdcSlot, error) {
	rows, err := c.db.Query(ctx, `
SELECT s.slot_name, s.active, coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn), 0)::float8 / 1048576,
       coalesce((SELECT to_char(st.confirmed_at, 'YYYY-MM-DD HH24:MI:SS') FROM cdc_state st WHERE st.slot = s.slot_name), '')
FROM pg_replication_slots s WHERE s.slot_type = 'logical' ORDER BY 1 LIMIT 20`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []cdcSlot
	for rows.Next() {
		var s cdcSlot
		if err := rows.Scan(&s.Slot, &s.Active, &s.BehindMB, &s.Confirmed); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

func (c *Console) heartbeats(ctx context.Context, now time.Time) ([]heartbeat, error) {
	rows, err := c.db.Query(ctx, `SELECT process, info::text, seen_at FROM engine_heartbeats
WHERE seen_at > now() - interval '1 hour' ORDER BY process LIMIT 50`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []heartbeat
	for rows.Next() {
		var h heartbeat
		var info string
		var seen time.Time
		if err := rows.Scan(&h.Process, &info, &seen); err != nil {
			return nil, err
		}
		_ = json.Unmarshal([]byte(info), &struct {
			BreakerOpen *bool `json:"breakerOpen"`
			Executors   any   `json:"executors"`
		}{BreakerOpen: &h.BreakerOpen, Executors: &h.Executors})
		h.Age, h.Stale = ago(now, seen), now.Sub(seen) > 30*time.Second
		out = append(out, h)
	}
	return out, rows.Err()
}

func (c *Console) buckets(ctx context.Context, now time.Time) ([]bucket, error) {
	rows, err := c.db.Query(ctx, `SELECT name, tokens, refreshed_at FROM rate_buckets ORDER BY name = 'gateway' DESC, refreshed_at DESC LIMIT 20`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []bucket
	for rows.Next() {
		var b bucket
		var at time.Time
		if err := rows.Scan(&b.Name, &b.Tokens, &at); err != nil {
			return nil, err
		}
		b.Age = ago(now, at)
		out = append(out, b)
	}
	return out, rows.Err()
}

// ---- payments search

func (c *Console) payments(w http.ResponseWriter, r *http.Request, v *view) {
	v.Title = "Payments"
	form := r.URL.Query()
	data := map[string]any{"Form": form, "Statuses": statuses, "ErrorClasses": errorClasses, "CanAct": v.Session.Role >= Operator,
		"OpenActions": map[string]string{"HOLD": "hold the ticked PENDING payments", "RELEASE": "release the ticked HELD payments",
			"CANCEL_PENDING": "cancel the ticked PENDING payments", "CANCEL_HELD": "cancel the ticked HELD payments",
			"RESCHEDULE": "reschedule the ticked PENDING payments", "RUN_NOW": "run the ticked PENDING payments now"}}
	v.Data = data
	if len(form) == 0 {
		c.render(w, http.StatusOK, "payments.html", v)
		return
	}
	q, err := parseQuery(form, c.now())
	if err != nil {
		v.Error = err.Error()
		c.render(w, http.StatusBadRequest, "payments.html", v)
		return
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	res, err := search(ctx, c.db, q)
	if err != nil {
		c.dbFail(w, r, v, "search", err)
		return
	}
	data["Result"] = res
	data["ExportURL"] = Prefix + "/payments.csv?" + q.Values().Encode()
	if res.Next != "" {
		next := q.Values()
		next.Set("after", res.Next)
		data["NextURL"] = Prefix + "/payments?" + next.Encode()
	}
	c.render(w, http.StatusOK, "payments.html", v)
}

// ---- one payment

type timelineEntry struct {
	At     time.Time
	What   string
	Detail string
	Ref    string
	Error  string
}

type auditEntry struct {
	At     time.Time
	Op     string
	Status string
	Note   string
}

type webhookEntry struct {
	EventID string
	At      time.Time
}

func (c *Console) paymentPage(w http.ResponseWriter, r *http.Request, v *view) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		c.fail(w, r, v, http.StatusBadRequest, fmt.Sprintf("%q is not a payment id.", clip(r.PathValue("id"), 60)))
		return
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	st := store.NewStore(c.db)
	p, err := st.GetAny(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		c.fail(w, r, v, http.StatusNotFound, "No payment has the id "+id.String()+".")
		return
	}
	if err != nil {
		c.dbFail(w, r, v, "read payment", err)
		return
	}
	var reason string
	var probes int32
	if err := c.db.QueryRow(ctx, `SELECT coalesce(dead_letter_reason, ''), probes FROM payments WHERE id = $1 AND due_time = $2`,
		id, p.DueAt).Scan(&reason, &probes); err != nil {
		c.dbFail(w, r, v, "read payment", err)
		return
	}
	tl := []timelineEntry{{At: p.CreatedAt, What: "created", Detail: "due " + p.DueAt.UTC().Format(time.RFC3339)}}
	for _, a := range p.Attempts {
		tl = append(tl, timelineEntry{At: a.StartedAt, What: fmt.Sprintf("attempt %d claimed and sent", a.Attempt)})
		if a.FinishedAt != nil {
			tl = append(tl, timelineEntry{At: *a.FinishedAt, What: fmt.Sprintf("attempt %d: %s", a.Attempt, a.Outcome),
				Ref: a.GatewayRef, Error: a.Error})
		}
	}
	rows, err := c.db.Query(ctx, `SELECT at, actor, action, prev_status, new_status, reason FROM payment_actions
WHERE payment_id = $1 ORDER BY id LIMIT 200`, id)
	if err != nil {
		c.dbFail(w, r, v, "read actions", err)
		return
	}
	for rows.Next() {
		var at time.Time
		var actor, action, prev, next, why string
		if err := rows.Scan(&at, &actor, &action, &prev, &next, &why); err != nil {
			rows.Close()
			c.dbFail(w, r, v, "read actions", err)
			return
		}
		tl = append(tl, timelineEntry{At: at, What: fmt.Sprintf("%s by %s: %s → %s", action, actor, prev, next), Detail: why})
	}
	rows.Close()
	sort.SliceStable(tl, func(i, j int) bool { return tl[i].At.Before(tl[j].At) })
	var hooks []webhookEntry
	rows, err = c.db.Query(ctx, `SELECT event_id, received_at FROM webhook_events WHERE charge_key = $1 ORDER BY received_at LIMIT 100`, id.String())
	if err != nil {
		c.dbFail(w, r, v, "read webhooks", err)
		return
	}
	for rows.Next() {
		var h webhookEntry
		if err := rows.Scan(&h.EventID, &h.At); err != nil {
			rows.Close()
			c.dbFail(w, r, v, "read webhooks", err)
			return
		}
		hooks = append(hooks, h)
	}
	rows.Close()
	hist, notes, auditErr := c.auditHistory(ctx, id)
	data := map[string]any{"P": p, "Reason": reason, "Probes": probes, "Timeline": tl, "Webhooks": hooks,
		"Audit": hist, "Notifications": notes, "AuditConfigured": c.cfg.AuditDB != nil, "AuditError": auditErr,
		"JSON": maskedJSON(p, reason), "CanAct": v.Session.Role >= Operator && (p.Status == payment.DeadLettered || openActions[p.Status] != nil),
		"Actions": actions, "Dead": p.Status == payment.DeadLettered}
	if p.Status != payment.DeadLettered {
		data["Actions"] = openActions[p.Status]
	}
	v.Title, v.Data = "Payment "+id.String(), data
	c.render(w, http.StatusOK, "payment.html", v)
}

// auditHistory reads the payment's changes from the audit log, in commit
// order, and the notifications they emitted.
func (c *Console) auditHistory(ctx context.Context, id uuid.UUID) ([]auditEntry, []auditEntry, string) {
	if c.cfg.AuditDB == nil {
		return nil, nil, ""
	}
	rows, err := c.cfg.AuditDB.Query(ctx, `SELECT committed_at, table_name, op, coalesce(status, ''), event FROM audit_events
WHERE payment_id = $1 ORDER BY lsn LIMIT 500`, id)
	if err != nil {
		c.log.Warn("console: audit history", "err", err)
		return nil, nil, "The audit database did not answer."
	}
	defer rows.Close()
	var hist, notes []auditEntry
	for rows.Next() {
		var e auditEntry
		var table, ev string
		if err := rows.Scan(&e.At, &table, &e.Op, &e.Status, &ev); err != nil {
			return nil, nil, "The audit log could not be read."
		}
		e.Op = table + " " + map[string]string{"c": "created", "u": "updated", "d": "deleted", "r": "snapshot"}[e.Op]
		hist = append(hist, e)
		if parsed, err := envelope.Parse([]byte(ev)); err == nil {
			if typ, ceID, ok := audit.Notified(parsed); ok {
				notes = append(notes, auditEntry{At: e.At, Op: typ, Note: "ce_id " + ceID})
			}
		}
	}
	if rows.Err() != nil {
		return nil, nil, "The audit log could not be read."
	}
	return hist, notes, ""
}

var secretKey = regexp.MustCompile(`(?i)secret|token|password|passwd|card|pan|cvv|cvc|iban|account|ssn|auth|key`)

// maskedJSON is the payment as JSON with what may be secret hidden:
// metadata values under secret-looking keys, and any value that looks
// like a credential.
func maskedJSON(p *payment.Payment, reason string) string {
	meta := map[string]string{}
	for k, val := range p.Metadata {
		if secretKey.MatchString(k) || looksSecret(val) {
			val = mask(val)
		}
		meta[k] = val
	}
	m := map[string]any{"id": p.ID, "payer": p.Payer, "payee": p.Payee, "amountMinor": p.Amount, "currency": p.Currency,
		"dueAt": p.DueAt, "status": p.Status, "description": p.Description, "metadata": meta, "attempt": p.Attempt,
		"gatewayRef": p.GatewayRef, "lastError": p.LastError, "failureReason": p.FailReason, "probeFirst": p.ProbeFirst,
		"deadLetterReason": reason, "createdAt": p.CreatedAt, "updatedAt": p.UpdatedAt}
	b, _ := json.MarshalIndent(m, "", "  ")
	return string(b)
}

func looksSecret(s string) bool {
	for _, p := range []string{"sk_", "rk_", "whsec_", "pk_live_", "Bearer ", "eyJ"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func mask(s string) string {
	if utf8.RuneCountInString(s) <= 4 {
		return "****"
	}
	r := []rune(s)
	return "****" + string(r[len(r)-4:])
}

// paymentAction requests one action on one dead letter; it runs at once
// unless the amount needs a second operator.
func (c *Console) paymentAction(w http.ResponseWriter, r *http.Request, v *view) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		c.fail(w, r, v, http.StatusBadRequest, "That is not a payment id.")
		return
	}
	action, reason, runAt, msg := readAction(r.PostForm, c.now())
	if msg != "" {
		c.fail(w, r, v, http.StatusBadRequest, msg)
		return
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	from := actionFrom[action]
	var sel Selection
	if from == payment.DeadLettered {
		sel, err = selectDead(ctx, c.db, []uuid.UUID{id}, "")
	} else {
		sel, err = selectOpen(ctx, c.db, []uuid.UUID{id}, from)
	}
	if err != nil {
		c.dbFail(w, r, v, "select", err)
		return
	}
	if len(sel.IDs) == 0 {
		c.fail(w, r, v, http.StatusConflict, "This payment is not "+string(from)+" (any more): nothing to do.")
		return
	}
	rid, _, err := c.createRequest(ctx, action, "payment "+id.String(), reason, runAt, v.Session.who(), sel)
	if err != nil {
		c.dbFail(w, r, v, "create request", err)
		return
	}
	http.Redirect(w, r, fmt.Sprintf("%s/requests/%d", Prefix, rid), http.StatusSeeOther)
}

// readAction reads and checks the action and reason of a form, and a
// reschedule's new run time (UTC, in the future).
func readAction(f url.Values, now time.Time) (action, reason string, runAt *time.Time, msg string) {
	action = f.Get("action")
	if _, ok := actionFrom[action]; !ok {
		return "", "", nil, "Choose an action: re-drive, resolve or cancel a dead letter; hold, release, reschedule, run now or cancel an open payment."
	}
	reason = strings.TrimSpace(f.Get("reason"))
	switch {
	case reason == "":
		return "", "", nil, "A reason is required: say why (it goes into the audit log)."
	case !utf8.ValidString(reason) || utf8.RuneCountInString(reason) > 300:
		return "", "", nil, "The reason is at most 300 characters of text."
	case strings.ContainsFunc(reason, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return "", "", nil, "The reason must be one line of plain text."
	}
	if action == "RESCHEDULE" {
		t, err := time.Parse(dateForm, f.Get("runAt"))
		switch {
		case err != nil:
			return "", "", nil, "A reschedule needs the time it runs at (UTC)."
		case !t.After(now):
			return "", "", nil, "The new run time must be in the future: to run a payment now, choose run now."
		}
		runAt = &t
	}
	return action, reason, runAt, ""
}

// ---- dead letters

var reasons = []string{string(payment.RetriesExhausted), string(payment.AmbiguousUnresolved), string(payment.KeyConflicted),
	string(payment.LeaseTooShort), string(payment.OutcomeUnrecordable)}

const deadCountSQL = `
SELECT count(*), coalesce(sum(amount_minor), 0)::bigint FROM (
  SELECT amount_minor FROM payments WHERE status = ` + dead + ` AND due_time <= now() AND ($1 = '' OR dead_letter_reason = $1)
  LIMIT $2) s`

func (c *Console) deadLetters(w http.ResponseWriter, r *http.Request, v *view) {
	reason := r.URL.Query().Get("reason")
	if reason != "" && !contains(reasons, reason) {
		c.fail(w, r, v, http.StatusBadRequest, fmt.Sprintf("%q is not a dead-letter reason.", clip(reason, 40)))
		return
	}
	afterAt, afterID := time.Unix(0, 0).UTC(), uuid.Nil
	if a := r.URL.Query().Get("after"); a != "" {
		at, id, ok := strings.Cut(a, "_")
		t, e1 := time.Parse(time.RFC3339Nano, at)
		u, e2 := uuid.Parse(id)
		if !ok || e1 != nil || e2 != nil {
			c.fail(w, r, v, http.StatusBadRequest, "The page link is damaged: open the list again.")
			return
		}
		afterAt, afterID = t, u
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	var n, total int64
	if err := c.db.QueryRow(ctx, deadCountSQL, reason, maxBulk+1).Scan(&n, &total); err != nil {
		c.dbFail(w, r, v, "count dead letters", err)
		return
	}
	// Unfiltered, a page is the index's next rows; by reason, up to scanCap
	// of them are looked at for a page.
	// Only those that have come due, as the count above.
	res, err := walkDead(ctx, c.db, afterAt, afterID, c.now().Add(time.Microsecond), reason != "", func(x Row) bool {
		return reason == "" || x.Reason == reason
	})
	if err != nil {
		c.dbFail(w, r, v, "list dead letters", err)
		return
	}
	list, next := res.Rows, res.Next
	data := map[string]any{"Rows": list, "Reason": reason, "Reasons": reasons, "Count": n, "Capped": n > maxBulk,
		"Total": total, "Actions": actions, "CanAct": v.Session.Role >= Operator, "CanBulk": v.Session.Role >= Admin}
	if next != "" {
		q := url.Values{"after": {next}}
		if reason != "" {
			q.Set("reason", reason)
		}
		data["NextURL"] = Prefix + "/dead-letters?" + q.Encode()
	}
	v.Title, v.Data = "Dead letters", data
	c.render(w, http.StatusOK, "deadletters.html", v)
}

// selection reads what a dead-letter form asks to act on: the ticked
// ids, or all that match its reason filter.
func (c *Console) selection(ctx context.Context, f url.Values) (Selection, string, string, error) {
	if from := actionFrom[f.Get("action")]; from != payment.DeadLettered {
		// On PENDING or HELD payments: the ticked ones only.
		if f.Get("scope") != "selected" {
			return Selection{}, "", "Tick the payments to act on.", nil
		}
		ids, msg := ticked(f)
		if msg == "" && len(ids) == 0 {
			msg = "Tick the payments to act on."
		}
		if msg != "" {
			return Selection{}, "", msg, nil
		}
		s, err := selectOpen(ctx, c.db, ids, from)
		return s, fmt.Sprintf("%d ticked, %s", len(ids), from), "", err
	}
	reason := f.Get("filter")
	if reason != "" && !contains(reasons, reason) {
		return Selection{}, "", "That is not a dead-letter reason.", nil
	}
	var ids []uuid.UUID
	scope := f.Get("scope")
	switch scope {
	case "selected":
		var msg string
		if ids, msg = ticked(f); msg != "" {
			return Selection{}, "", msg, nil
		}
		if len(ids) == 0 {
			return Selection{}, "", "Tick the payments to act on, or choose all that match.", nil
		}
	case "all":
	default:
		return Selection{}, "", "Choose the ticked payments or all that match.", nil
	}
	s, err := selectDead(ctx, c.db, ids, reason)
	filter := "reason " + reason
	if reason == "" {
		filter = "all dead letters"
	}
	if scope == "selected" {
		filter = fmt.Sprintf("%d ticked", len(ids))
	}
	return s, filter, "", err
}

// ticked reads a form's ticked payment ids (at most a page; none is the
// caller's to refuse); msg says what is wrong with them, for the operator.
func ticked(f url.Values) (ids []uuid.UUID, msg string) {
	if len(f["id"]) > pageSize {
		return nil, "At most one page of payments can be ticked."
	}
	for _, s := range f["id"] {
		id, err := uuid.Parse(s)
		if err != nil {
			return nil, "The form carried a damaged payment id."
		}
		ids = append(ids, id)
	}
	return ids, ""
}

// bulk is a dead-letter form read and checked: the action, its reason and
// what it would act on now.
type bulk struct {
	action, reason, filter string
	runAt                  *time.Time
	sel                    Selection
}

// readBulk reads a dead-letter form; on a mistake it has answered.
func (c *Console) readBulk(ctx context.Context, w http.ResponseWriter, r *http.Request, v *view) (bulk, bool) {
	var b bulk
	var msg string
	if b.action, b.reason, b.runAt, msg = readAction(r.PostForm, c.now()); msg != "" {
		c.fail(w, r, v, http.StatusBadRequest, msg)
		return b, false
	}
	var err error
	b.sel, b.filter, msg, err = c.selection(ctx, r.PostForm)
	switch {
	case err != nil:
		c.dbFail(w, r, v, "select dead letters", err)
	case msg != "":
		c.fail(w, r, v, http.StatusBadRequest, msg)
	case len(b.sel.IDs) == 0:
		c.fail(w, r, v, http.StatusConflict, "Nothing matches (any more): no "+string(actionFrom[b.action])+" payment to act on.")
	case len(b.sel.IDs) > 1 && v.Session.Role < Admin:
		c.fail(w, r, v, http.StatusForbidden, "An action on more than one payment needs the admin role.")
	default:
		return b, true
	}
	return b, false
}

// confirm shows what b would do: the count and the amounts, and whether
// a second operator must approve.
func (c *Console) confirm(w http.ResponseWriter, r *http.Request, v *view, status int, b bulk) {
	v.Title = "Confirm"
	v.Data = map[string]any{"Action": b.action, "ActionName": actionName(b.action), "Reason": b.reason, "RunAt": b.runAt, "Sel": b.sel,
		"Filter": b.filter, "Form": r.PostForm, "NeedsApproval": c.needsApproval(b.sel, c.runningFor(r, v))}
	c.render(w, status, "confirm.html", v)
}

// runningFor is the session's running totals for the confirm page; a
// failure to read them says "needs approval" rather than nothing.
func (c *Console) runningFor(r *http.Request, v *view) running {
	ctx, cancel := c.ctx(r)
	defer cancel()
	rn, err := runningOf(ctx, c.db, v.Session.Operator, c.cfg.ApprovalWindow)
	if err != nil {
		return running{Count: c.cfg.ApprovalCount}
	}
	return rn
}

// bulkPreview shows what an action would do before anything is asked.
func (c *Console) bulkPreview(w http.ResponseWriter, r *http.Request, v *view) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	if b, ok := c.readBulk(ctx, w, r, v); ok {
		c.confirm(w, r, v, http.StatusOK, b)
	}
}

// bulkRequest records the confirmed action. What it acts on is selected
// again: if the count changed since the preview, the operator sees the
// new count first.
func (c *Console) bulkRequest(w http.ResponseWriter, r *http.Request, v *view) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	b, ok := c.readBulk(ctx, w, r, v)
	if !ok {
		return
	}
	if want, err := strconv.Atoi(r.PostForm.Get("count")); err != nil || want != len(b.sel.IDs) {
		v.Flash = fmt.Sprintf("The selection changed since you looked: it is now %d payments.", len(b.sel.IDs))
		c.confirm(w, r, v, http.StatusConflict, b)
		return
	}
	id, _, err := c.createRequest(ctx, b.action, b.filter, b.reason, b.runAt, v.Session.who(), b.sel)
	if err != nil {
		c.dbFail(w, r, v, "create request", err)
		return
	}
	http.Redirect(w, r, fmt.Sprintf("%s/requests/%d", Prefix, id), http.StatusSeeOther)
}

// ---- requests

func (c *Console) requestsPage(w http.ResponseWriter, r *http.Request, v *view) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	list, err := c.listRequests(ctx)
	if err != nil {
		c.dbFail(w, r, v, "list requests", err)
		return
	}
	names := map[string]string{}
	for a := range actionFrom {
		names[a] = actionName(a) + " (" + string(actionFrom[a]) + ")"
	}
	v.Title, v.Data = "Requests", map[string]any{"Requests": list, "Actions": names}
	for _, q := range list {
		if q.State == "RUNNING" || q.State == "APPROVED" {
			v.Refresh = 2
		}
	}
	c.render(w, http.StatusOK, "requests.html", v)
}

func (c *Console) requestPage(w http.ResponseWriter, r *http.Request, v *view) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		c.fail(w, r, v, http.StatusBadRequest, "That is not a request number.")
		return
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	q, err := c.request(ctx, id)
	if errors.Is(err, errNotFound) {
		c.fail(w, r, v, http.StatusNotFound, fmt.Sprintf("There is no request #%d.", id))
		return
	}
	if err != nil {
		c.dbFail(w, r, v, "read request", err)
		return
	}
	if q.State == "RUNNING" || q.State == "APPROVED" {
		v.Refresh = 1
	}
	shown := q.IDs
	if len(shown) > 100 {
		shown = shown[:100]
	}
	v.Title = fmt.Sprintf("Request #%d", id)
	v.Data = map[string]any{"R": q, "ActionName": actionName(q.Action) + " (" + string(actionFrom[q.Action]) + ")", "Shown": shown,
		"CanDecide": v.Session.Role >= Admin && q.State == "AWAITING_APPROVAL" && q.RequestedBy != v.Session.Operator,
		"Own":       q.RequestedBy == v.Session.Operator}
	c.render(w, http.StatusOK, "request.html", v)
}

func (c *Console) decide(w http.ResponseWriter, r *http.Request, v *view) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		c.fail(w, r, v, http.StatusBadRequest, "That is not a request number.")
		return
	}
	var approve bool
	switch r.PostForm.Get("decision") {
	case "approve":
		approve = true
	case "reject":
	default:
		c.fail(w, r, v, http.StatusBadRequest, "Approve or reject.")
		return
	}
	ctx, cancel := c.ctx(r)
	defer cancel()
	if err := c.decideRequest(ctx, id, approve, v.Session.who()); err != nil {
		c.fail(w, r, v, http.StatusConflict, "Not decided: "+err.Error()+".")
		return
	}
	http.Redirect(w, r, fmt.Sprintf("%s/requests/%d", Prefix, id), http.StatusSeeOther)
}

// ---- reconciliation

type reconRun struct {
	ID                        int64
	Day                       time.Time
	TriggeredBy, State, Error string
	StartedAt                 time.Time
	FinishedAt                *time.Time
	Charges, Payments         int64
	Repaired, Mismatches      int32
	Kinds                     map[string]int
}

func (c *Console) reconPage(w http.ResponseWriter, r *http.Request, v *view) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	rows, err := c.db.Query(ctx, `SELECT id, day, triggered_by, state, started_at, finished_at, charges, payments, repaired, mismatches, error
FROM reconciliation_runs ORDER BY id DESC LIMIT 60`)
	if err != nil {
		c.dbFail(w, r, v, "list runs", err)
		return
	}
	var runs []*reconRun
	var ids []int64
	for rows.Next() {
		var x reconRun
		if err := rows.Scan(&x.ID, &x.Day, &x.TriggeredBy, &x.State, &x.StartedAt, &x.FinishedAt, &x.Charges, &x.Payments,
			&x.Repaired, &x.Mismatches, &x.Error); err != nil {
			rows.Close()
			c.dbFail(w, r, v, "list runs", err)
			return
		}
		x.Kinds = map[string]int{}
		runs, ids = append(runs, &x), append(ids, x.ID)
	}
	rows.Close()
	if len(ids) > 0 {
		krows, err := c.db.Query(ctx, `SELECT run_id, kind, count(*) FROM reconciliation_items WHERE run_id = ANY($1) GROUP BY 1, 2`, ids)
		if err != nil {
			c.dbFail(w, r, v, "run items", err)
			return
		}
		at := map[int64]*reconRun{}
		for _, x := range runs {
			at[x.ID] = x
		}
		for krows.Next() {
			var id int64
			var kind string
			var n int
			if err := krows.Scan(&id, &kind, &n); err != nil {
				krows.Close()
				c.dbFail(w, r, v, "run items", err)
				return
			}
			at[id].Kinds[kind] = n
		}
		krows.Close()
	}
	v.Title = "Reconciliation"
	v.Data = map[string]any{"Runs": runs, "Yesterday": c.now().UTC().AddDate(0, 0, -1).Format("2006-01-02")}
	for _, x := range runs {
		if x.State == "RUNNING" {
			v.Refresh = 5
		}
	}
	c.render(w, http.StatusOK, "recon.html", v)
}

func (c *Console) reconStart(w http.ResponseWriter, r *http.Request, v *view) {
	day, err := time.Parse("2006-01-02", r.PostForm.Get("day"))
	now := c.now().UTC()
	if err != nil || day.After(now) || day.Before(now.AddDate(-1, 0, 0)) {
		c.fail(w, r, v, http.StatusBadRequest, "Choose a day (YYYY-MM-DD) within the last year, not in the future.")
		return
	}
	if err := c.actions.Reconcile(r.Context(), v.Session.Name, day); err != nil {
		if apierr.Reason(err) == apierr.ReasonRunInProgress {
			c.fail(w, r, v, http.StatusConflict, "A run of "+day.Format("2006-01-02")+" is already running: wait for it to finish (this page shows it RUNNING).")
			return
		}
		c.fail(w, r, v, http.StatusConflict, "The run did not start: "+actionError(err))
		return
	}
	c.log.Info("console: reconciliation started", "day", day.Format("2006-01-02"), "operator", v.Session.Name)
	http.Redirect(w, r, Prefix+"/reconciliation", http.StatusSeeOther)
}

// ---- gateway

type breakerChange struct {
	At      time.Time
	Process string
	Open    bool
}

func (c *Console) gatewayPage(w http.ResponseWriter, r *http.Request, v *view) {
	ctx, cancel := c.ctx(r)
	defer cancel()
	snap := c.cache.snapshot()
	now := c.now()
	var xs []time.Time
	var retry, ambig, decl []float64
	var tot, ok, dc, rt, am int64
	for _, s := range snap.Samples {
		n := float64(s.Succeeded + s.Declined + s.Retryable + s.Ambiguous)
		xs = append(xs, s.At)
		pct := func(k int64) float64 {
			if n == 0 {
				return 0
			}
			return 100 * float64(k) / n
		}
		retry, ambig, decl = append(retry, pct(s.Retryable)), append(ambig, pct(s.Ambiguous)), append(decl, pct(s.Declined))
		tot += s.Succeeded + s.Declined + s.Retryable + s.Ambiguous
		ok, dc, rt, am = ok+s.Succeeded, dc+s.Declined, rt+s.Retryable, am+s.Ambiguous
	}
	chart := lineChart("Gateway answers by class, last hour (% of attempts)", "%", now.Add(-history), now,
		[]series{{Name: "retryable", Class: "s2", X: xs, Y: retry}, {Name: "ambiguous", Class: "s1", X: xs, Y: ambig},
			{Name: "declined", Class: "s3", X: xs, Y: decl}})
	rows, err := c.db.Query(ctx, `SELECT at, process, open FROM breaker_changes WHERE at > now() - interval '24 hours' ORDER BY at DESC LIMIT 100`)
	if err != nil {
		c.dbFail(w, r, v, "breaker history", err)
		return
	}
	var changes []breakerChange
	for rows.Next() {
		var b breakerChange
		if err := rows.Scan(&b.At, &b.Process, &b.Open); err != nil {
			rows.Close()
			c.dbFail(w, r, v, "breaker history", err)
			return
		}
		changes = append(changes, b)
	}
	rows.Close()
	hb, err := c.heartbeats(ctx, now)
	if err != nil {
		c.dbFail(w, r, v, "engine heartbeats", err)
		return
	}
	bs, err := c.buckets(ctx, now)
	if err != nil {
		c.dbFail(w, r, v, "rate buckets", err)
		return
	}
	v.Title, v.Refresh = "Gateway", 10
	v.Data = map[string]any{"Chart": chart, "Total": tot, "Succeeded": ok, "Declined": dc, "Retryable": rt, "Ambiguous": am,
		"Changes": changes, "Heartbeats": hb, "Buckets": bs}
	c.render(w, http.StatusOK, "gateway.html", v)
}

func ago(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	}
	return fmt.Sprintf("%dh ago", int(d.Hours()))
}
