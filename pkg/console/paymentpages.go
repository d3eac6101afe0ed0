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
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/paysched/paysched/pkg/console/consoledb"
	"github.com/paysched/paysched/pkg/console/login"
	"github.com/paysched/paysched/pkg/events/audit"
	"github.com/paysched/paysched/pkg/events/envelope"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/pkg/store"
)

// The payments pages: the search, one payment with its timeline, and an action on it.

func (c *Console) payments(w http.ResponseWriter, r *http.Request, v *view) {
	v.Title = "Payments"
	form := r.URL.Query()
	data := map[string]any{"Form": form, "Statuses": statuses, "ErrorClasses": errorClasses, "CanAct": v.Session.Role >= login.Operator,
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
	ctx := r.Context()
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
	id, ok := c.pathUUID(w, r, v, fmt.Sprintf("%q is not a payment id.", clip(r.PathValue("id"), 60)))
	if !ok {
		return
	}
	ctx := r.Context()
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
	q := consoledb.New(c.db)
	extra, err := q.PaymentExtra(ctx, consoledb.PaymentExtraParams{ID: id, DueTime: p.DueAt})
	if err != nil {
		c.dbFail(w, r, v, "read payment", err)
		return
	}
	reason, probes := extra.DeadLetterReason, extra.Probes
	tl := []timelineEntry{{At: p.CreatedAt, What: "created", Detail: "due " + p.DueAt.UTC().Format(time.RFC3339)}}
	for _, a := range p.Attempts {
		tl = append(tl, timelineEntry{At: a.StartedAt, What: fmt.Sprintf("attempt %d claimed and sent", a.Attempt)})
		if a.FinishedAt != nil {
			tl = append(tl, timelineEntry{At: *a.FinishedAt, What: fmt.Sprintf("attempt %d: %s", a.Attempt, a.Outcome),
				Ref: a.GatewayRef, Error: a.Error})
		}
	}
	moves, err := q.PaymentActions(ctx, id)
	if err != nil {
		c.dbFail(w, r, v, "read actions", err)
		return
	}
	for _, m := range moves {
		tl = append(tl, timelineEntry{At: m.At, What: fmt.Sprintf("%s by %s: %s → %s", m.Action, m.Actor, m.PrevStatus, m.NewStatus), Detail: m.Reason})
	}
	sent, sentTL, err := c.paymentDeliveries(ctx, id)
	if err != nil {
		c.dbFail(w, r, v, "read webhook deliveries", err)
		return
	}
	tl = append(tl, sentTL...)
	sort.SliceStable(tl, func(i, j int) bool { return tl[i].At.Before(tl[j].At) })
	got, err := q.PaymentWebhooks(ctx, id.String())
	if err != nil {
		c.dbFail(w, r, v, "read webhooks", err)
		return
	}
	var hooks []webhookEntry
	for _, h := range got {
		hooks = append(hooks, webhookEntry{EventID: h.EventID, At: h.ReceivedAt})
	}
	hist, notes, auditErr := c.auditHistory(ctx, id)
	data := map[string]any{"P": p, "Reason": reason, "Probes": probes, "Timeline": tl, "Webhooks": hooks, "Sent": sent,
		"CanResend": v.Session.Role >= login.Operator,
		"Audit":     hist, "Notifications": notes, "AuditConfigured": c.cfg.AuditDB != nil, "AuditError": auditErr,
		"JSON": maskedJSON(p, reason), "CanAct": v.Session.Role >= login.Operator && (p.Status == payment.DeadLettered || openActions[p.Status] != nil),
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
	rows, err := consoledb.New(c.cfg.AuditDB).AuditHistory(ctx, &id)
	if err != nil {
		c.log.Warn("console: audit history", "err", err)
		return nil, nil, "The audit database did not answer."
	}
	var hist, notes []auditEntry
	for _, r := range rows {
		e := auditEntry{At: r.CommittedAt, Op: r.Op, Status: r.Status}
		table, ev := r.TableName, r.Event
		e.Op = table + " " + map[string]string{"c": "created", "u": "updated", "d": "deleted", "r": "snapshot"}[e.Op]
		hist = append(hist, e)
		if parsed, err := envelope.Parse([]byte(ev)); err == nil {
			if typ, ceID, ok := audit.Notified(parsed); ok {
				notes = append(notes, auditEntry{At: e.At, Op: typ, Note: "ce_id " + ceID})
			}
		}
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
	id, ok := c.pathUUID(w, r, v, "That is not a payment id.")
	if !ok {
		return
	}
	action, reason, runAt, msg := readAction(r.PostForm, c.now())
	if msg != "" {
		c.fail(w, r, v, http.StatusBadRequest, msg)
		return
	}
	ctx := r.Context()
	from := actionFrom[action]
	var sel Selection
	var err error
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
	rid, _, err := c.createRequest(ctx, action, "payment "+id.String(), reason, runAt, v.Session.Who(), sel)
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
