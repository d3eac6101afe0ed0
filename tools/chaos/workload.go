package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/apierr"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/payment"
)

// Every 50th payment is created by two concurrent single creates with one
// idempotency key; every 20th (offset 3) gets a cancel racing its store.
// Every 100th (offset 7) pays a merchant whose bank is down for the run's
// first 40 s (see outagePayee): those due first spend their budget and are
// dead-lettered, and the run re-drives them.
const (
	dupEvery    = 50
	cancelEvery = 20
	outageEvery = 100
)

// Skewed tenants: every other payment is the big tenant's, the rest are
// spread over 49 small ones, all paid by one actor (the tokens carry a
// tenant claim). One small tenant has weight 3, one an in-flight cap and
// one a rate cap (setLimits), so the fair claim's every path runs under
// the faults.
const smallTenants = 49

func tenantOf(i int) string {
	if i%2 == 0 {
		return "tenant-big"
	}
	return fmt.Sprintf("tenant-%02d", (i/2)%smallTenants+1)
}

type workload struct {
	r     *run
	actor string
	// ctx carries the token of payment i's tenant (any of them cancels:
	// one actor pays for all).
	ctx   func(c context.Context, i int) context.Context
	admin func(context.Context) context.Context
	// approver is a second admin's: it approves the first's requests.
	approver  func(context.Context) context.Context
	approvals int // requests the second admin approved

	ids  []string // paymentId by index
	dues []time.Time

	mu        sync.Mutex
	cancelled map[string]bool // cancels answered 200 CANCELLED
	late      int             // cancels answered ALREADY_PROCESSING
	lost      int             // cancels that never got an answer
	lostErr   error           // the last such error
	lostDue   []time.Time     // their due times
	dups      int
	redriven  int // dead letters re-driven during the run
	refused   int // re-drives refused because the gateway holds a charge
	held      int // payments held during the run (each released again)
	holdMiss  int // holds refused: the payment was claimed (or moved) first
	moved     int // payments rescheduled during the run
	ranNow    int // of those, run now again before their new time
	moveMiss  int // reschedules refused: the payment was claimed (or moved) first
}

func newWorkload(r *run) *workload {
	w := &workload{r: r, actor: "chaos", cancelled: map[string]bool{}}
	toks := map[string]string{}
	for i := range 2 * (smallTenants + 1) {
		t := tenantOf(i)
		toks[t], _ = auth.MintFor([]byte(auth.DevSecret), auth.DefaultIssuer, auth.DefaultAudience, w.actor, t, false, 50*time.Minute)
	}
	adm, _ := auth.Mint([]byte(auth.DevSecret), auth.DefaultIssuer, auth.DefaultAdminAudience, "chaos-ops", true, 50*time.Minute)
	// A second admin approves what the first asks (four eyes: the
	// default policy lets one admin only hold).
	second, _ := auth.Mint([]byte(auth.DevSecret), auth.DefaultIssuer, auth.DefaultAdminAudience, "chaos-approver", true, 50*time.Minute)
	w.ctx = func(c context.Context, i int) context.Context {
		return metadata.AppendToOutgoingContext(c, "authorization", "Bearer "+toks[tenantOf(i)])
	}
	w.admin = func(c context.Context) context.Context {
		return metadata.AppendToOutgoingContext(c, "authorization", "Bearer "+adm)
	}
	w.approver = func(c context.Context) context.Context {
		return metadata.AppendToOutgoingContext(c, "authorization", "Bearer "+second)
	}
	return w
}

// approved has the second admin approve the request an action answered
// (none: it was done at once, or refused) and answers its outcome as the
// action's: nil when the payment moved, the refusal otherwise (an action
// the gateway refused is FAILED_PRECONDITION, one a claim beat ABORTED,
// one whose gateway could not answer UNAVAILABLE, as the API answers them
// when it acts at once).
func (w *workload) approved(c context.Context, r *payschedv1.OperatorRequest, err error) error {
	if err != nil || r == nil {
		return err
	}
	resp, err := w.r.admin.ApproveOperatorRequest(w.approver(c), &payschedv1.ApproveOperatorRequestRequest{Name: r.GetName()})
	if err != nil {
		return err
	}
	got := resp.GetRequest()
	for got.GetState() != "DONE" {
		// The background runner took it first: wait for it.
		select {
		case <-c.Done():
			return status.Error(codes.DeadlineExceeded, "request "+got.GetName()+" still "+got.GetState())
		case <-time.After(100 * time.Millisecond):
		}
		g, err := w.r.admin.GetOperatorRequest(w.approver(c), &payschedv1.GetOperatorRequestRequest{Name: got.GetName()})
		if err != nil {
			return err
		}
		got = g.GetRequest()
	}
	w.mu.Lock()
	w.approvals++
	w.mu.Unlock()
	msg := strings.Join(got.GetErrors(), "; ")
	switch {
	case got.GetDone() == 1:
		return nil
	case got.GetSkipped() == 1:
		return status.Error(codes.Aborted, msg)
	case strings.Contains(msg, "Unavailable:"):
		return status.Error(codes.Unavailable, msg)
	}
	return status.Error(codes.FailedPrecondition, msg)
}

// transient: the API (or its database) was down; the same request again
// is safe (idempotency key, idempotent cancel).
func transient(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Internal, codes.Unknown, codes.Canceled, codes.ResourceExhausted:
		return true
	}
	return false
}

// retry calls f until it succeeds, fails for good, or the deadline passes.
func retry(ctx context.Context, until time.Time, f func(context.Context) error) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := f(cctx)
		cancel()
		if err == nil || !transient(err) || time.Now().After(until) || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Duration(100+rand.IntN(200)) * time.Millisecond)
	}
}

func (w *workload) request(i int, t0 time.Time) *payschedv1.CreateScheduledPaymentRequest {
	due := t0.Add(time.Duration(i) * w.r.cfg.Spread / time.Duration(w.r.cfg.Payments))
	payee := fmt.Sprintf("merchant-%03d", i%200)
	if i%outageEvery == 7 {
		payee = fmt.Sprintf("%smerchant-%03d", outagePayee, i%200)
	}
	return &payschedv1.CreateScheduledPaymentRequest{Payee: payee, Amount: int64(100 + i%5000), Currency: "USD",
		DueAt: timestamppb.New(due), RequestId: fmt.Sprintf("chaos-%d-%s", i, uuid.NewString())}
}

// setLimits gives tenant-01 weight 3, tenant-02 an in-flight cap of 20 and
// tenant-03 a rate cap of 50 claims/s, through the admin API.
func (w *workload) setLimits(ctx context.Context) error {
	until := time.Now().Add(time.Minute)
	for t, l := range map[string]*payschedv1.TenantLimits{
		"tenant-01": {Weight: 3}, "tenant-02": {MaxInflight: 20}, "tenant-03": {MaxRate: 50},
	} {
		if err := retry(ctx, until, func(c context.Context) error {
			_, err := w.r.admin.SetTenantLimits(w.admin(c), &payschedv1.SetTenantLimitsRequest{Tenant: t, Limits: l})
			return err
		}); err != nil {
			return fmt.Errorf("set limits of %s: %w", t, err)
		}
	}
	return nil
}

// create schedules every payment through the API, retrying through its
// crashes with the same idempotency keys.
func (w *workload) create(ctx context.Context, t0 time.Time) error {
	n := w.r.cfg.Payments
	w.ids, w.dues = make([]string, n), make([]time.Time, n)
	reqs := make([]*payschedv1.CreateScheduledPaymentRequest, n)
	for i := range n {
		reqs[i] = w.request(i, t0)
		w.dues[i] = reqs[i].GetDueAt().AsTime()
	}
	until := time.Now().Add(2 * time.Minute)
	var batch []int
	flush := func() error {
		items := make([]*payschedv1.CreateScheduledPaymentRequest, len(batch))
		for k, i := range batch {
			items[k] = reqs[i]
		}
		return retry(ctx, until, func(c context.Context) error {
			resp, err := w.r.api.BatchCreateScheduledPayments(w.ctx(c, batch[0]), &payschedv1.BatchCreateScheduledPaymentsRequest{Items: items})
			if err != nil {
				return err
			}
			for k, res := range resp.GetResults() {
				if res.GetPayment().GetPaymentId() == "" {
					return fmt.Errorf("item %d rejected: %s %s", k, res.GetReason(), res.GetMessage())
				}
				w.ids[batch[k]] = res.GetPayment().GetPaymentId()
			}
			return nil
		})
	}
	var dupIdx []int
	byTenant := map[string][]int{}
	for i := range n {
		if i%dupEvery == 0 {
			dupIdx = append(dupIdx, i)
			continue
		}
		t := tenantOf(i)
		byTenant[t] = append(byTenant[t], i)
		if len(byTenant[t]) == 500 {
			batch = byTenant[t]
			if err := flush(); err != nil {
				return fmt.Errorf("schedule: %w", err)
			}
			byTenant[t] = nil
		}
	}
	for t, b := range byTenant {
		if batch = b; len(batch) > 0 {
			if err := flush(); err != nil {
				return fmt.Errorf("schedule %s: %w", t, err)
			}
		}
	}
	// Duplicate creates: two concurrent single creates per key must name
	// one payment.
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, i := range dupIdx {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			var got [2]string
			var inner sync.WaitGroup
			for k := range 2 {
				inner.Add(1)
				go func() {
					defer inner.Done()
					err := retry(ctx, until, func(c context.Context) error {
						resp, err := w.r.api.CreateScheduledPayment(w.ctx(c, i), reqs[i])
						if err == nil {
							got[k] = resp.GetPayment().GetPaymentId()
						}
						return err
					})
					if err != nil {
						w.r.violation("duplicate create %d failed: %v", i, err)
					}
				}()
			}
			inner.Wait()
			if got[0] != got[1] || got[0] == "" {
				w.r.violation("two creates with one idempotency key made %q and %q", got[0], got[1])
			}
			w.ids[i] = got[0]
		}()
	}
	wg.Wait()
	w.dups = len(dupIdx)
	w.r.logf("scheduled %d payments (%d by two concurrent creates with one key), due %s..%s",
		n, len(dupIdx), t0.UTC().Format("15:04:05"), t0.Add(w.r.cfg.Spread).UTC().Format("15:04:05"))
	return nil
}

// cancels sends a cancel shortly before each chosen payment's due time, so
// that it races the claim, and records what the API answered.
func (w *workload) cancels(ctx context.Context) {
	var wg sync.WaitGroup
	for i, id := range w.ids {
		if i%cancelEvery != 3 || id == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// From 300 ms before the due time to 700 ms after: some win,
			// some find the payment claimed.
			at := w.dues[i].Add(time.Duration(rand.IntN(1000)-300) * time.Millisecond)
			time.Sleep(time.Until(at))
			var st payschedv1.PaymentStatus
			err := retry(ctx, at.Add(15*time.Second), func(c context.Context) error {
				resp, err := w.r.api.CancelScheduledPayment(w.ctx(c, i), &payschedv1.CancelScheduledPaymentRequest{PaymentId: id})
				st = resp.GetPayment().GetStatus()
				return err
			})
			w.mu.Lock()
			defer w.mu.Unlock()
			switch {
			case err == nil && st == payschedv1.PaymentStatus_CANCELLED:
				w.cancelled[id] = true
			case status.Code(err) == codes.Aborted || status.Code(err) == codes.FailedPrecondition:
				w.late++
			default:
				w.lost++
				w.lostErr = err
				w.lostDue = append(w.lostDue, w.dues[i])
			}
		}()
	}
	wg.Wait()
	w.r.logf("cancels: %d answered CANCELLED, %d too late (ALREADY_PROCESSING), %d unanswered (last error: %v)",
		len(w.cancelled), w.late, w.lost, w.lostErr)
	if len(w.lostDue) > 0 {
		sort.Slice(w.lostDue, func(a, b int) bool { return w.lostDue[a].Before(w.lostDue[b]) })
		w.r.logf("unanswered cancels were due %s..%s", w.lostDue[0].UTC().Format("15:04:05.0"),
			w.lostDue[len(w.lostDue)-1].UTC().Format("15:04:05.0"))
	}
}

// redrives re-drives every dead letter every few seconds during the run,
// as an impatient operator would. With the gateway forgetting keys after
// --key-retention, a re-drive that charged without asking first would
// double-charge; the API asks the gateway, and refuses a charged one.
func (w *workload) redrives(ctx context.Context, end time.Time) {
	for time.Now().Before(end) && ctx.Err() == nil {
		time.Sleep(3 * time.Second)
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := w.r.admin.ListDeadLetters(w.admin(c), &payschedv1.ListDeadLettersRequest{PageSize: 100})
		cancel()
		if err != nil {
			continue // the API may be down (kill -9): next round
		}
		for _, d := range resp.GetDeadLetters() {
			c, cancel := context.WithTimeout(ctx, 10*time.Second)
			resp, err := w.r.admin.RedrivePayment(w.admin(c), &payschedv1.RedrivePaymentRequest{
				PaymentId: d.GetPayment().GetPaymentId(), Note: "chaos: re-drive during the run"})
			err = w.approved(c, resp.GetRequest(), err)
			cancel()
			w.mu.Lock()
			switch {
			case err == nil:
				w.redriven++
			case status.Code(err) == codes.FailedPrecondition, status.Code(err) == codes.Unavailable:
				// Charged, no longer dead, or the gateway could not prove it
				// holds no charge (its lookup lags): refused, as it must be.
				w.refused++
			}
			w.mu.Unlock()
		}
	}
	w.r.logf("re-drives during the run: %d re-driven, %d refused (charged, no longer dead, or no proven absence)", w.redriven, w.refused)
}

// holds holds every 97th payment shortly before it falls due, as an
// operator stopping a mistaken payment would, and releases each a few
// seconds later (whatever is down meanwhile: it tries until end and then
// on, until released, so that no payment is left HELD for the checks). A
// hold racing a claim either wins (the payment waits, then executes after
// its release) or misses (it was claimed): never both.
func (w *workload) holds(ctx context.Context, end time.Time) {
	var toRelease []string
	for i := 0; i < len(w.ids) && time.Now().Before(end) && ctx.Err() == nil; i += 97 {
		if w.ids[i] == "" {
			continue
		}
		if d := time.Until(w.dues[i].Add(-200 * time.Millisecond)); d > 0 {
			time.Sleep(d)
		}
		err := retry(ctx, end, func(c context.Context) error {
			_, err := w.r.admin.HoldPayment(w.admin(c), &payschedv1.HoldPaymentRequest{PaymentId: w.ids[i], Note: "chaos: hold during the run"})
			return err
		})
		w.mu.Lock()
		switch {
		case err == nil, status.Code(err) == codes.FailedPrecondition && apierr.Metadata(err, "status") == string(payment.Held):
			// Held (the second: an answer lost to a kill, the retry found
			// it held already).
			w.held++
			toRelease = append(toRelease, w.ids[i])
		case status.Code(err) == codes.FailedPrecondition, status.Code(err) == codes.Aborted:
			w.holdMiss++
		}
		w.mu.Unlock()
		if len(toRelease) > 0 && time.Now().Second()%3 == 0 {
			toRelease = w.release(ctx, toRelease, end)
		}
	}
	for len(toRelease) > 0 && ctx.Err() == nil {
		toRelease = w.release(ctx, toRelease, time.Now().Add(30*time.Second))
		if len(toRelease) > 0 {
			time.Sleep(time.Second)
		}
	}
	w.mu.Lock()
	approvals := w.approvals
	w.mu.Unlock()
	w.r.logf("holds during the run: %d held and released, %d missed (claimed first); %d requests approved by a second admin so far",
		w.held, w.holdMiss, approvals)
}

// reschedules pushes every 89th payment (from the 45th; never one the
// holds take) 5 s past its due time shortly before it falls due, and runs
// every other one of those now again a moment after its due time, as an
// operator would. Either races the claims: it wins (the payment runs at
// the new time) or misses (it was claimed), never both, and the payment
// completes either way (the stuck check).
func (w *workload) reschedules(ctx context.Context, end time.Time) {
	var wg sync.WaitGroup
	for i, n := 45, 0; i < len(w.ids) && time.Now().Before(end) && ctx.Err() == nil; i += 89 {
		if w.ids[i] == "" || i%97 == 0 {
			continue
		}
		if d := time.Until(w.dues[i].Add(-200 * time.Millisecond)); d > 0 {
			time.Sleep(d)
		}
		id, due := w.ids[i], w.dues[i]
		err := retry(ctx, end, func(c context.Context) error {
			resp, err := w.r.admin.ReschedulePayment(w.admin(c), &payschedv1.ReschedulePaymentRequest{PaymentId: id,
				RunAt: timestamppb.New(due.Add(5 * time.Second)), Note: "chaos: reschedule during the run"})
			return w.approved(c, resp.GetRequest(), err)
		})
		w.mu.Lock()
		if err == nil {
			w.moved++
		} else if c := status.Code(err); c == codes.FailedPrecondition || c == codes.Aborted {
			w.moveMiss++
		}
		w.mu.Unlock()
		if n++; err != nil || n%2 == 1 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(due.Add(500 * time.Millisecond)))
			err := retry(ctx, end.Add(30*time.Second), func(c context.Context) error {
				resp, err := w.r.admin.RunPaymentNow(w.admin(c), &payschedv1.RunPaymentNowRequest{PaymentId: id, Note: "chaos: run now"})
				return w.approved(c, resp.GetRequest(), err)
			})
			if err == nil {
				w.mu.Lock()
				w.ranNow++
				w.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	w.r.logf("reschedules during the run: %d rescheduled (%d of them run now again), %d missed (claimed first)", w.moved, w.ranNow, w.moveMiss)
}

// release releases ids and returns those it could not (the API was down).
func (w *workload) release(ctx context.Context, ids []string, until time.Time) []string {
	var left []string
	for _, id := range ids {
		err := retry(ctx, until, func(c context.Context) error {
			resp, err := w.r.admin.ReleasePayment(w.admin(c), &payschedv1.ReleasePaymentRequest{PaymentId: id, Note: "chaos: release"})
			return w.approved(c, resp.GetRequest(), err)
		})
		if err != nil && status.Code(err) != codes.FailedPrecondition {
			left = append(left, id)
		}
	}
	return left
}
