// Package webhookbench is `make bench-webhooks`: the webhook-dispatcher (a
// separate process) delivers N payments' notifications, produced onto
// Kafka at a steady rate, to 3 tenants of 2 endpoints each, one endpoint
// failing half its attempts with 500 and one hanging 20 s. It reports how
// soon the healthy endpoints had each event, signatures verified, and
// whether any was lost or duplicated.
package webhookbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/auth"

	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/events/notification"
	"github.com/paysched/paysched/pkg/events/tenanthook"
	"github.com/paysched/paysched/pkg/payment"
	"github.com/paysched/paysched/tools/apibench"
)

// Config is a run's.
type Config struct {
	// DB is the webhooks' database (the endpoints are made there);
	// Schedule the schedule's (Postgres's backends are labelled from it).
	DB, Schedule *pgxpool.Pool
	// Pids are the processes to account for (name → pid): the product's,
	// the stand-ins' (gateway-sim, kafka) and the harness's.
	Pids    map[string]int
	Brokers []string
	// N payments; each makes one notification, Rate a second.
	N, Rate int
	// Hang is how long the hanging endpoint holds each request.
	Hang time.Duration
	// Timeout bounds the wait for the healthy endpoints to have everything.
	Timeout time.Duration
	Out     io.Writer
	// API, when set, is payments-api (gRPC): the run then schedules N
	// payments through it, Rate a second, each due Lead after its
	// creation, and the engine, cdc and the audit-consumer make their
	// notifications (created, then completed: two a payment). Unset: the
	// run produces N notifications onto Kafka itself.
	API  string
	Lead time.Duration
}

// Result is the last line's figures.
type Result struct {
	Delivered, Verified, Lost int
	P99                       time.Duration
	DuplicatesPerEndpoint     int
	// DispatcherUs is the dispatcher's CPU per delivery, its Postgres
	// backends' included.
	DispatcherUs float64
}

// receiver is one endpoint's server.
type receiver struct {
	name    string
	tenant  string
	healthy bool
	secret  string
	mu      sync.Mutex
	first   map[string]time.Time     // webhook-id → its first verified arrival
	change  map[string]time.Duration // webhook-id → that arrival's lag after the change notified (ce_time)
	arrived int
	refused atomic.Int64
	srv     *http.Server
	url     string
}

func newReceiver(name, tenant string, healthy bool, handle func(http.ResponseWriter) bool) (*receiver, error) {
	r := &receiver{name: name, tenant: tenant, healthy: healthy, first: map[string]time.Time{}, change: map[string]time.Duration{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r.url = "http://" + ln.Addr().String() + "/hook"
	r.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		id := req.Header.Get(tenanthook.HeaderID)
		if !handle(w) {
			return
		}
		now := time.Now()
		if err := tenanthook.Verify(r.secret, id, req.Header.Get(tenanthook.HeaderTimestamp), req.Header.Get(tenanthook.HeaderSignature), body, now); err != nil {
			r.refused.Add(1)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		// From the change notified (the body's timestamp: its ce_time) to
		// this verified arrival.
		var b struct {
			Timestamp time.Time `json:"timestamp"`
		}
		var lag time.Duration
		if json.Unmarshal(body, &b) == nil && !b.Timestamp.IsZero() {
			lag = now.Sub(b.Timestamp)
		}
		r.mu.Lock()
		r.arrived++
		if _, seen := r.first[id]; !seen {
			r.first[id], r.change[id] = now, lag
		}
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// Run is one run; its last line is the issue's.
func Run(ctx context.Context, c Config) (Result, error) {
	ok := func(http.ResponseWriter) bool { return true }
	var rngMu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	flaky := func(w http.ResponseWriter) bool {
		rngMu.Lock()
		fail := rng.IntN(2) == 0
		rngMu.Unlock()
		if fail {
			w.WriteHeader(http.StatusInternalServerError)
			return false
		}
		return true
	}
	hang := func(w http.ResponseWriter) bool { time.Sleep(c.Hang); return true }
	specs := []struct {
		tenant, name string
		healthy      bool
		h            func(http.ResponseWriter) bool
	}{
		{"bench-a", "a-healthy", true, ok}, {"bench-a", "a-failing-half", false, flaky},
		{"bench-b", "b-healthy", true, ok}, {"bench-b", "b-hanging", false, hang},
		{"bench-c", "c-healthy-1", true, ok}, {"bench-c", "c-healthy-2", true, ok},
	}
	var recv []*receiver
	defer func() {
		for _, r := range recv {
			_ = r.srv.Close()
		}
	}()
	for _, s := range specs {
		r, err := newReceiver(s.name, s.tenant, s.healthy, s.h)
		if err != nil {
			return Result{}, err
		}
		recv = append(recv, r)
		_, secret, err := tenanthook.CreateEndpoint(ctx, c.DB, tenanthook.Endpoint{Tenant: s.tenant, URL: r.url, Description: s.name,
			MaxInflight: 16, MaxPerSecond: 10000})
		if err != nil {
			return Result{}, fmt.Errorf("endpoint %s: %w", s.name, err)
		}
		r.secret = secret
	}
	// When each notification reached the topic, as a watch reading it
	// with short fetches sees it (the record's own timestamp is the
	// change's, set by the audit-consumer, so it would count the event
	// path's lag too): the delivery lag is measured from it.
	var notedMu sync.Mutex
	noted := map[string]time.Time{}
	watch, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.ConsumeTopics(kafka.DefaultTopics.Notifications),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(20*time.Millisecond))
	if err != nil {
		return Result{}, err
	}
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for wctx.Err() == nil {
			fs := watch.PollFetches(wctx)
			seen := time.Now()
			fs.EachRecord(func(rec *kgo.Record) {
				if id := notification.Header(rec, notification.HeaderID); id != nil {
					notedMu.Lock()
					if _, ok := noted[string(id)]; !ok {
						noted[string(id)] = seen
					}
					notedMu.Unlock()
				}
			})
		}
	}()
	defer func() { stopWatch(); <-watched; watch.Close() }()
	tenants := []string{"bench-a", "bench-b", "bench-c"}
	perTenant := map[string]int{}
	// Two notifications a payment, created then completed, whether the
	// engine makes them or the run produces them: the dispatcher alone is
	// measured at the deliveries per second of the run with the engine.
	perPayment := 2
	label := c.Schedule
	if label == nil {
		label = c.DB
	}
	meter := apibench.StartMeter(ctx, label, c.Pids)
	if c.API != "" {
		if err := schedule(ctx, c, tenants, perTenant); err != nil {
			return Result{}, err
		}
	} else if err := produce(ctx, c, tenants, perTenant); err != nil {
		return Result{}, err
	}
	want := func(r *receiver) int { return perPayment * perTenant[r.tenant] }
	deadline := time.Now().Add(c.Timeout)
	for {
		done := true
		for _, r := range recv {
			r.mu.Lock()
			n := len(r.first)
			r.mu.Unlock()
			if r.healthy && n < want(r) {
				done = false
			}
		}
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Every notification seen on the topic by the watch (bounded wait).
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		notedMu.Lock()
		n := len(noted)
		notedMu.Unlock()
		if n >= c.N*perPayment {
			break
		}
	}
	var res Result
	var lags, changes []time.Duration
	unseen, early := 0, 0
	for _, r := range recv {
		r.mu.Lock()
		dup := r.arrived - len(r.first)
		fmt.Fprintf(c.Out, "endpoint %-15s distinct %7d of %7d  arrivals %7d  refused %d\n", r.name, len(r.first), want(r), r.arrived, r.refused.Load())
		if r.healthy {
			res.Delivered += len(r.first)
			res.Verified += len(r.first)
			res.Lost += want(r) - len(r.first)
			res.DuplicatesPerEndpoint = max(res.DuplicatesPerEndpoint, dup)
			notedMu.Lock()
			for id, at := range r.first {
				if t, ok := noted[id]; ok {
					if at.Before(t) {
						early++ // the watch saw it after the endpoint did
					}
					lags = append(lags, max(0, at.Sub(t)))
				} else {
					unseen++
				}
				changes = append(changes, r.change[id])
			}
			notedMu.Unlock()
		}
		r.mu.Unlock()
		if r.refused.Load() > 0 {
			return res, fmt.Errorf("endpoint %s refused %d signatures", r.name, r.refused.Load())
		}
	}
	if early > 0 {
		fmt.Fprintf(c.Out, "%d deliveries arrived before the watch read their notification (counted as 0 ms)\n", early)
	}
	if unseen > 0 {
		fmt.Fprintf(c.Out, "%d deliveries of notifications the watch never read (left out of the lag)\n", unseen)
	}
	slices.Sort(lags)
	slices.Sort(changes)
	if len(lags) > 0 {
		res.P99 = lags[(len(lags)*99+99)/100-1]
		fmt.Fprintf(c.Out, "healthy endpoints: lag p50 %.1f ms  p99 %.1f ms  max %.1f ms (notification seen on the topic to first verified arrival)\n",
			ms(lags[len(lags)/2]), ms(res.P99), ms(lags[len(lags)-1]))
	}
	if c.API != "" && len(changes) > 0 {
		fmt.Fprintf(c.Out, "healthy endpoints: from the payment's change (ce_time, cdc and the audit-consumer included) p50 %.1f ms  p99 %.1f ms\n",
			ms(changes[len(changes)/2]), ms(changes[(len(changes)*99+99)/100-1]))
	}
	// The account, per delivery: every notification to each of the six
	// endpoints, however many attempts it took.
	deliveries := c.N * perPayment * 2
	acct, per := meter.Account(deliveries, "delivery")
	dispatcher := per["webhook-dispatcher"]
	for name, us := range per {
		// Its connections, named by application_name on the schedule's
		// cluster; on the events' cluster the meter names backends by
		// database, and the webhooks' database (bench-webhooks.sh's
		// webhooks_hooks) serves the dispatcher alone once the endpoints
		// are registered.
		if strings.HasPrefix(name, apibench.PGPart+"webhook-dispatcher") ||
			strings.HasPrefix(name, apibench.PGPart+"db ") && strings.HasSuffix(name, "_hooks") {
			dispatcher += us
		}
	}
	res.DispatcherUs = dispatcher
	fmt.Fprintf(c.Out, "cpu per delivery postgres %.1f µs, by what each process serves:\n%s", per["postgres"],
		strings.ReplaceAll(apibench.PGParts(per), "cpu per payment", "cpu per delivery"))
	fmt.Fprintln(c.Out, acct)
	fmt.Fprintf(c.Out, "dispatcher with its database share: %.1f µs per delivery (%d deliveries)\n", dispatcher, deliveries)
	fmt.Fprintf(c.Out, "webhooks delivered=%d verified=%d p99_ms=%.1f duplicates_per_endpoint=%d lost=%d dispatcher_us=%.1f %s\n",
		res.Delivered, res.Verified, ms(res.P99), res.DuplicatesPerEndpoint, res.Lost, dispatcher, acct.Fields())
	return res, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// produce puts c.N payments' notifications (created and completed) onto
// the topic, c.Rate payments a second, a third per tenant (the dispatcher
// alone: no engine, the same deliveries a second).
func produce(ctx context.Context, c Config, tenants []string, perTenant map[string]int) error {
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.ProducerLinger(2*time.Millisecond))
	if err != nil {
		return err
	}
	defer prod.Close()
	start := time.Now()
	tick := time.Second / time.Duration(max(1, c.Rate/100)) // a burst of 1/100 of the rate each tick
	burst := max(1, c.Rate/(int(time.Second/tick)))
	var produced int
	var perr error
	var pmu sync.Mutex
	for produced < c.N {
		for range min(burst, c.N-produced) {
			id := uuid.NewString()
			tenant := tenants[produced%3]
			perTenant[tenant]++
			now := time.Now()
			// A payment's two notifications, as the engine's would be.
			for _, st := range []payment.Status{payment.Pending, payment.Completed} {
				typ := notification.Created
				if st != payment.Pending {
					typ = notification.TypePrefix + "completed"
				}
				data := `{"amount":1250,"currency":"EUR","paymentId":"` + id + `","status":"` + string(st) + `","tenant":"` + tenant + `"}`
				note := notification.Note{ID: id + "-" + string(st), Type: typ, Source: notification.SourcePayments,
					Time: now, Subject: id, Tenant: tenant, Key: []byte(id), Data: []byte(data)}
				prod.Produce(ctx, note.Record(kafka.DefaultTopics.Notifications),
					func(_ *kgo.Record, err error) {
						if err != nil {
							pmu.Lock()
							perr = err
							pmu.Unlock()
						}
					})
			}
			produced++
		}
		if next := start.Add(time.Duration(produced) * time.Second / time.Duration(c.Rate)); time.Until(next) > 0 {
			time.Sleep(time.Until(next))
		}
	}
	if err := prod.Flush(ctx); err != nil {
		return err
	}
	if perr != nil {
		return fmt.Errorf("produce: %w", perr)
	}
	fmt.Fprintf(c.Out, "produced %d payments' notifications in %.1fs (%d/s asked)\n", produced, time.Since(start).Seconds(), c.Rate)
	return nil
}

// schedule creates c.N payments through payments-api, c.Rate a second in
// batches every 100 ms, a third per tenant (each tenant's token carries
// its tenant claim), each due c.Lead after its creation; the engine
// executes them and the event path notifies.
func schedule(ctx context.Context, c Config, tenants []string, perTenant map[string]int) error {
	cc, err := grpc.NewClient(c.API, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	api := payschedv1.NewPaymentsServiceClient(cc)
	toks := map[string]string{}
	for _, t := range tenants {
		if toks[t], err = auth.MintFor([]byte(auth.DevSecret), auth.DefaultIssuer, auth.DefaultAudience, "bench-payer", t, false,
			50*time.Minute); err != nil {
			return err
		}
	}
	lead := c.Lead
	if lead <= 0 {
		lead = 2 * time.Second
	}
	run := time.Now().UnixNano()
	start := time.Now()
	per := max(1, c.Rate/10) // each 100 ms
	made := 0
	for tick := 0; made < c.N; tick++ {
		for _, t := range tenants {
			n := min(per/len(tenants)+1, c.N-made)
			if n <= 0 {
				break
			}
			items := make([]*payschedv1.CreateScheduledPaymentRequest, n)
			due := timestamppb.New(time.Now().Add(lead))
			for i := range items {
				items[i] = &payschedv1.CreateScheduledPaymentRequest{Payee: "shop", Amount: 1250, Currency: "EUR", DueAt: due,
					RequestId: fmt.Sprintf("wh-%d-%d-%s-%d", run, tick, t, i)}
			}
			cctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+toks[t])
			resp, err := api.BatchCreateScheduledPayments(cctx, &payschedv1.BatchCreateScheduledPaymentsRequest{Items: items})
			if err != nil {
				return fmt.Errorf("schedule: %w", err)
			}
			for _, r := range resp.GetResults() {
				if r.GetPayment().GetPaymentId() == "" {
					return fmt.Errorf("schedule: an item was refused: %s %s", r.GetReason(), r.GetMessage())
				}
			}
			perTenant[t] += n
			made += n
		}
		if next := start.Add(time.Duration(tick+1) * 100 * time.Millisecond); time.Until(next) > 0 {
			time.Sleep(time.Until(next))
		}
	}
	fmt.Fprintf(c.Out, "scheduled %d payments in %.1fs (%d/s asked), each due %s after its creation\n", made,
		time.Since(start).Seconds(), c.Rate, lead)
	return nil
}
