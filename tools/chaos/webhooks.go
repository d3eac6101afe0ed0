package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/paysched/paysched/pkg/events/tenanthook"
)

// hookTenants have webhook endpoints in the run: the big tenant (half the
// payments) and two small ones with limits, each with one endpoint on
// each of the two receivers.
var hookTenants = []string{"tenant-big", "tenant-01", "tenant-02"}

// The receivers' ports (offsets from Base) and the dispatcher's.
const (
	receiverPort   = 440
	dispatcherPort = 430
)

// hookSchedule is the dispatcher's retry schedule in the run: the
// default's first retry is 5 s and its second 5 min, longer than the
// settle; these keep the run's retries within it while a receiver is down
// a few seconds at a time.
const hookSchedule = "1s,2s,4s,8s,15s,30s,60s,60s"

// receiver is one webhook receiver process stand-in: an HTTP server that
// verifies every delivery with its endpoint's secret, and that the driver
// takes down (its listener and connections closed, as a killed process's
// are) and brings back on the same port.
type receiver struct {
	name, addr string
	secrets    map[string]string // path -> the endpoint's secret

	mu       sync.Mutex
	srv      *http.Server
	got      map[string]int // path|webhook-id -> verified receipts
	refused  []string
	outages  int
	received int
}

func newReceiver(name, addr string) *receiver {
	return &receiver{name: name, addr: addr, secrets: map[string]string{}, got: map[string]int{}}
}

func (h *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return // the dispatcher retries
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	secret, ok := h.secrets[r.URL.Path]
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	h.received++
	id := r.Header.Get(tenanthook.HeaderID)
	if err := tenanthook.Verify(secret, id, r.Header.Get(tenanthook.HeaderTimestamp), r.Header.Get(tenanthook.HeaderSignature), body, time.Now()); err != nil {
		h.refused = append(h.refused, fmt.Sprintf("%s %s: %v", r.URL.Path, id, err))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	h.got[r.URL.Path+"|"+id]++
	w.WriteHeader(http.StatusNoContent)
}

// up listens on the receiver's port (again).
func (h *receiver) up() error {
	var ln net.Listener
	var err error
	// The port was just freed by down: a few tries while the kernel lets go.
	for try := 0; try < 50; try++ {
		if ln, err = net.Listen("tcp", h.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("receiver %s: %w", h.name, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	h.mu.Lock()
	h.srv = srv
	h.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
	return nil
}

// down closes the listener and every connection: deliveries under way get
// no answer, new ones are refused.
func (h *receiver) down() {
	h.mu.Lock()
	srv := h.srv
	h.srv = nil
	h.outages++
	h.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// setupWebhooks starts the two receivers and gives each hook tenant an
// endpoint on each, before any payment exists (the fan-out delivers to the
// endpoints a notification's tenant has when it is read).
func (r *run) setupWebhooks(ctx context.Context) error {
	r.hooks = []*receiver{newReceiver("receiver-a", r.addr(receiverPort)), newReceiver("receiver-b", r.addr(receiverPort+1))}
	for _, h := range r.hooks {
		for _, t := range hookTenants {
			path := "/hooks/" + t
			ep := tenanthook.Endpoint{Tenant: t, URL: "http://" + h.addr + path, Description: "chaos " + h.name,
				MaxInflight: 16, MaxPerSecond: 5000}
			if err := ep.Check(true); err != nil {
				return fmt.Errorf("webhook endpoint: %w", err)
			}
			_, secret, err := tenanthook.CreateEndpoint(ctx, r.hooksDB, ep)
			if err != nil {
				return fmt.Errorf("webhook endpoint of %s: %w", t, err)
			}
			h.secrets[path] = secret
		}
		if err := h.up(); err != nil {
			return err
		}
	}
	return nil
}

// webhookChaos kills, in turn, the dispatcher (kill -9) and each receiver
// (down for 1 to 4 s), every KillMin..KillMax over the due window, beside
// the random kills.
func (r *run) webhookChaos(ctx context.Context, end time.Time) {
	disp := r.proc("webhook-dispatcher")
	victims := []func() string{
		func() string {
			if err := disp.kill9(time.Duration(200+rand.IntN(1300)) * time.Millisecond); err != nil {
				r.violation("restart webhook-dispatcher: %v", err)
			}
			r.mu.Lock()
			r.kills[disp.name]++
			r.res.Kills++
			r.mu.Unlock()
			return "kill -9 webhook-dispatcher"
		},
	}
	for _, h := range r.hooks {
		victims = append(victims, func() string {
			h.down()
			time.Sleep(time.Duration(1000+rand.IntN(3000)) * time.Millisecond)
			if err := h.up(); err != nil {
				r.violation("%v", err)
			}
			return "down " + h.name
		})
	}
	for turn := 0; ctx.Err() == nil; turn++ {
		next := time.Now().Add(r.pause())
		if next.After(end) {
			return
		}
		time.Sleep(time.Until(next))
		r.event("%s", victims[turn%len(victims)]())
	}
}

// checkWebhooks waits for the deliveries to end, then checks that every
// notification of a hook tenant reached both of its endpoints, verified,
// and that a message delivered twice came with one webhook-id. notes are
// the notifications read back from Kafka: ce_id -> payment id.
func (r *run) checkWebhooks(ctx context.Context, notes map[string]string) {
	start := time.Now()
	for {
		open := r.countIn(ctx, r.hooksDB, `SELECT count(*) FROM webhook_deliveries WHERE state <> $1`, tenanthook.DeliveredState)
		if open == 0 || time.Since(start) > r.cfg.Settle {
			if open != 0 {
				r.logf("webhooks: %d deliveries not delivered after %s", open, r.cfg.Settle)
			}
			break
		}
		time.Sleep(time.Second)
	}
	// The tenants' of the notified payments.
	hooked := map[string]bool{}
	for _, t := range hookTenants {
		hooked[t] = true
	}
	tenantOfPayment := map[string]string{}
	rows, err := r.db.Query(ctx, `SELECT id::text, tenant FROM payment_index WHERE tenant = ANY($1)`, hookTenants)
	if err != nil {
		r.violation("webhooks: tenants: %v", err)
		return
	}
	for rows.Next() {
		var id, t string
		if err := rows.Scan(&id, &t); err != nil {
			r.violation("webhooks: tenants: %v", err)
			rows.Close()
			return
		}
		tenantOfPayment[id] = t
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		r.violation("webhooks: tenants: %v", err)
		return
	}
	expected, lost, delivered, dups, unknown := 0, 0, 0, 0, 0
	var missing []string
	for _, h := range r.hooks {
		h.mu.Lock()
		for key, n := range h.got {
			path, id, _ := strings.Cut(key, "|")
			pay, ok := notes[id]
			if !ok || "/hooks/"+tenantOfPayment[pay] != path {
				unknown++ // a webhook-id that is no notification of this endpoint's tenant
				continue
			}
			delivered++
			dups += n - 1
		}
		for id, pay := range notes {
			t, ok := tenantOfPayment[pay]
			if !ok || !hooked[t] {
				continue
			}
			expected++
			if h.got["/hooks/"+t+"|"+id] == 0 {
				lost++
				if len(missing) < 5 {
					missing = append(missing, fmt.Sprintf("%s %s (payment %s)", h.name, id, pay))
				}
			}
		}
		for _, f := range h.refused {
			r.violation("webhooks: %s refused a delivery: %s", h.name, f)
		}
		r.logf("webhooks: %s received %d deliveries (%d verified distinct), down %d times", h.name, h.received, len(h.got), h.outages)
		h.mu.Unlock()
	}
	r.res.Webhooks = WebhookResult{Endpoints: len(r.hooks) * len(hookTenants), Expected: expected, Delivered: delivered,
		Duplicates: dups, Lost: lost}
	if expected == 0 {
		r.violation("webhooks: no notification of a hook tenant to deliver")
	}
	if lost > 0 {
		r.violation("webhooks: %d of %d deliveries never reached their endpoint, e.g. %s", lost, expected, strings.Join(missing, ", "))
	}
	if unknown > 0 {
		r.violation("webhooks: %d webhook-ids received that are no notification of the endpoint's tenant", unknown)
	}
}

// WebhookResult is the chaos summary's webhooks line.
type WebhookResult struct {
	Endpoints, Expected, Delivered, Duplicates, Lost int
}

func (w WebhookResult) String() string {
	return fmt.Sprintf("chaos webhooks endpoints=%d expected=%d delivered=%d duplicates=%d lost=%d",
		w.Endpoints, w.Expected, w.Delivered, w.Duplicates, w.Lost)
}
