package tenanthook

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/events/notification"
	"github.com/paysched/paysched/pkg/platform/periodic"
	"github.com/paysched/paysched/pkg/platform/pgdb"
)

// Group is the dispatcher's consumer group: it scales out by partition.
const Group = "paysched-webhooks"

// EndpointDisabled is the event type announcing a disabled endpoint.
const EndpointDisabled = "paysched.webhook.endpoint_disabled"

// Config is a dispatcher's.
type Config struct {
	Brokers   []string
	KafkaOpts []kgo.Opt
	Group     string
	Topics    kafka.Topics
	Egress    Egress
	// Schedule: the retries' delays (default DefaultSchedule).
	Schedule Schedule
	// Retention: how long finished deliveries are kept (0: forever).
	Retention time.Duration
	// Connect opens the session of the cross-dispatcher slots (nil: this
	// dispatcher alone counts each endpoint's max_inflight).
	Connect func(context.Context) (*pgx.Conn, error)
	// MaxPending bounds the notifications read and not yet recorded
	// (default 20,000): the fetch waits beyond it.
	MaxPending int
}

// Validate says what is wrong with c.
func (c Config) Validate() error {
	switch {
	case len(c.Brokers) == 0 || c.Brokers[0] == "":
		return fmt.Errorf("no Kafka brokers")
	case c.Group == "":
		return fmt.Errorf("no consumer group")
	case c.Topics.Notifications == "":
		return fmt.Errorf("no notifications topic")
	case c.Egress.Timeout < time.Second || c.Egress.Timeout > time.Minute:
		return fmt.Errorf("timeout %s: want 1 s to 1 min (the spec suggests 15 to 30 s)", c.Egress.Timeout)
	case c.Retention < 0 || (c.Retention > 0 && c.Retention < time.Hour):
		return fmt.Errorf("retention %s: want 0 (forever) or at least 1h", c.Retention)
	case c.MaxPending < 0:
		return fmt.Errorf("max pending %d: want 0 (the default) or more", c.MaxPending)
	}
	return nil
}

// Dispatcher reads the notifications and hands each to its Deliverer,
// committing a record's offset once its every delivery is recorded.
type Dispatcher struct {
	cl         *kgo.Client
	topic      string
	log        *slog.Logger
	deliverer  *Deliverer
	maxPending int
	m          struct {
		attempts *prometheus.CounterVec
		lag      prometheus.Histogram
		read     prometheus.Counter
		recheck  prometheus.Counter
		handOffs *prometheus.CounterVec
	}
	// offsets tracks what may commit, per partition.
	mu      sync.Mutex
	parts   map[int32]*partition
	pending int
	room    chan struct{}
	// A partition assigned (at start, after a rebalance or the broker's
	// restart) is read again from its committed offset, and a previous
	// owner may have recorded records past it: fresh marks it until its
	// first fetch, whose high watermark bounds what any previous owner
	// can have read; records below recheck[p] are looked up (Recorded)
	// before they are attempted, the ones above are new and are not.
	fresh   map[int32]bool
	recheck map[int32]int64
}

// partition is one partition's records read and not yet committed, in
// offset order: the commit moves past a record once it is done.
type partition struct {
	recs []*tracked
	done *kgo.Record // the newest record that may commit
}

type tracked struct {
	rec  *kgo.Record
	done bool
}

// New makes a dispatcher over the webhooks' database db; its metrics go
// to reg.
func New(cfg Config, db pgdb.DB, reg prometheus.Registerer, log *slog.Logger) (*Dispatcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("webhook-dispatcher config: %w", err)
	}
	opts := []kgo.Opt{kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.WithLogger(kafka.ClientLogger(log)),
		kgo.ConsumeTopics(cfg.Topics.Notifications),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Committed by hand once the deliveries are recorded.
		kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(20 * time.Millisecond),
		kgo.FetchMaxBytes(8 << 20),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	}
	x := &Dispatcher{topic: cfg.Topics.Notifications, log: log, parts: map[int32]*partition{},
		maxPending: cfg.MaxPending, room: make(chan struct{}, 1), fresh: map[int32]bool{}, recheck: map[int32]int64{}}
	// Called before the assigned partitions' fetches begin.
	opts = append(opts, kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
		x.mu.Lock()
		defer x.mu.Unlock()
		for _, p := range assigned[x.topic] {
			x.fresh[p] = true
		}
	}))
	cl, err := kgo.NewClient(append(opts, cfg.KafkaOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	x.cl = cl
	if x.maxPending == 0 {
		x.maxPending = 20000
	}
	x.m.attempts = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "paysched_webhook_attempts_total",
		Help: "Webhook delivery attempts by class: delivered, gone, throttled, rejected, broken, blocked."}, []string{"class"})
	x.m.lag = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "paysched_webhook_delivery_lag_seconds",
		Help:    "From the notification to its successful delivery.",
		Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 3600}})
	x.m.read = prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_webhook_notifications_total",
		Help: "Notifications read (redeliveries included)."})
	x.m.recheck = prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_webhook_notifications_rechecked_total",
		Help: "Notifications looked up before their attempts, read again after an assignment (a restart, a rebalance) below the offset a previous owner may have reached."})
	disabled := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "paysched_webhook_endpoints_disabled",
		Help: "Endpoints disabled (410 Gone, or failing for 5 days), as this dispatcher's cache holds them."}, func() float64 {
		if x.deliverer.targets == nil {
			return 0
		}
		return float64(x.deliverer.targets.disabled())
	})
	x.m.handOffs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "paysched_webhook_handoffs_total",
		Help: "Deliveries the fast path left to the retries: waited (their endpoint's room or rate) or held (an attempt under way past the hand-off)."}, []string{"why"})
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "paysched_webhook_pending_notifications",
		Help: "Notifications read and not yet recorded (their offsets wait)."}, func() float64 {
		x.mu.Lock()
		defer x.mu.Unlock()
		return float64(x.pending)
	})
	recording := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "paysched_webhook_results_waiting",
		Help: "Attempt results waiting to be recorded."}, func() float64 { return float64(len(x.deliverer.out)) })
	reg.MustRegister(x.m.attempts, x.m.lag, x.m.read, x.m.recheck, x.m.handOffs, disabled, pending, recording)
	x.deliverer = &Deliverer{DB: db, Client: cfg.Egress.Client(), Schedule: cfg.Schedule, Lease: cfg.Egress.Timeout + 15*time.Second,
		Connect: cfg.Connect, Retention: cfg.Retention, Log: log, OnDisabled: x.announce,
		OnHandOff: func(waited, held int) {
			x.m.handOffs.WithLabelValues("waited").Add(float64(waited))
			x.m.handOffs.WithLabelValues("held").Add(float64(held))
		},
		OnAttempt: func(c Class, _, lag time.Duration) {
			x.m.attempts.WithLabelValues(string(c)).Inc()
			if c == Delivered {
				x.m.lag.Observe(lag.Seconds())
			}
		}}
	x.deliverer.defaults()
	return x, nil
}

// Close leaves the group.
func (x *Dispatcher) Close() { x.cl.Close() }

// Run reads and delivers until ctx ends; then it stops reading, lets the
// deliverer finish (what waits is handed to the retries, what is under way
// ends), and commits what was recorded.
func (x *Dispatcher) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	dctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	go func() { errc <- x.deliverer.Run(dctx) }()
	select {
	case <-x.deliverer.Ready():
	case <-ctx.Done():
		stop()
		return <-errc
	}
	committed := make(chan struct{})
	go func() { x.committer(ctx); close(committed) }()
	x.read(ctx)
	<-committed
	stop()
	err := <-errc
	x.commit(context.Background())
	return err
}

// read polls notifications and submits each.
func (x *Dispatcher) read(ctx context.Context) {
	for {
		x.mu.Lock()
		full := x.pending >= x.maxPending
		x.mu.Unlock()
		if full {
			select {
			case <-ctx.Done():
				return
			case <-x.room:
				continue
			}
		}
		fs := x.cl.PollRecords(ctx, 1000)
		if ctx.Err() != nil {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			x.log.Warn("webhooks: fetch", "topic", t, "partition", p, "err", err)
		})
		recs := fs.Records()
		x.m.read.Add(float64(len(recs)))
		// Each fetched partition's look-up bound, read under the lock once
		// per poll; the records are decoded outside it (done() takes it
		// from every delivery).
		below := map[int32]int64{}
		x.mu.Lock()
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if x.fresh[p.Partition] && p.Err == nil {
				delete(x.fresh, p.Partition)
				x.recheck[p.Partition] = p.HighWatermark
			}
			below[p.Partition] = x.recheck[p.Partition]
			if x.fresh[p.Partition] {
				below[p.Partition] = math.MaxInt64
			}
		})
		x.mu.Unlock()
		notes := make([]notification.Note, len(recs))
		ids := make([]string, 0, len(recs))
		for i, r := range recs {
			n, ok := notification.Decode(r)
			if ok && json.Valid(n.Data) {
				notes[i] = n
				// Below the high watermark its partition had when it was
				// assigned, a record may have been read and recorded by a
				// previous owner (or this process's previous life); past it,
				// nobody can have, unless the notification itself is
				// published again (a resync's snapshot): only those are
				// looked up. A partition whose first fetch failed is looked
				// up whole.
				if r.Offset < below[r.Partition] || n.Replay {
					ids = append(ids, n.ID)
				}
			}
		}
		// What a restart, a rebalance or offsets lost (a broker's) make
		// read again is recorded already: it is not sent again.
		var known map[string]map[uuid.UUID]bool
		if len(ids) > 0 {
			x.m.recheck.Add(float64(len(ids)))
			var err error
			if known, err = x.deliverer.Recorded(ctx, ids); err != nil && ctx.Err() == nil {
				x.log.Warn("webhooks: which notifications are recorded (attempting them all)", "err", err)
			}
		}
		for i, r := range recs {
			tr := x.track(r)
			if notes[i].ID == "" {
				x.done(tr)
				continue
			}
			x.deliverer.SubmitKnown(notes[i], func() { x.done(tr) }, known[notes[i].ID])
		}
	}
}

func (x *Dispatcher) track(r *kgo.Record) *tracked {
	x.mu.Lock()
	defer x.mu.Unlock()
	p := x.parts[r.Partition]
	if p == nil {
		p = &partition{}
		x.parts[r.Partition] = p
	}
	tr := &tracked{rec: r}
	p.recs = append(p.recs, tr)
	x.pending++
	return tr
}

// done marks tr recorded; the partition's commit point moves past every
// done record at its head.
func (x *Dispatcher) done(tr *tracked) {
	x.mu.Lock()
	defer x.mu.Unlock()
	tr.done = true
	p := x.parts[tr.rec.Partition]
	n := 0
	for n < len(p.recs) && p.recs[n].done {
		p.done = p.recs[n].rec
		n++
	}
	if n > 0 {
		clear(p.recs[:n])
		p.recs = p.recs[n:]
		x.pending -= n
		select {
		case x.room <- struct{}{}:
		default:
		}
	}
}

// commitEvery is how often recorded offsets are committed.
const commitEvery = 100 * time.Millisecond

func (x *Dispatcher) committer(ctx context.Context) {
	periodic.Run(ctx, commitEvery, x.commit)
}

// commit commits each partition's recorded head. Read again after a
// rebalance or a restart, a record's deliveries find their rows (the key
// keeps the first), or are attempted again under the same webhook-id.
func (x *Dispatcher) commit(ctx context.Context) {
	x.mu.Lock()
	var recs []*kgo.Record
	for _, p := range x.parts {
		if p.done != nil {
			recs = append(recs, p.done)
			p.done = nil
		}
	}
	x.mu.Unlock()
	if len(recs) == 0 {
		return
	}
	if err := x.cl.CommitRecords(ctx, recs...); err != nil && ctx.Err() == nil {
		x.log.Warn("webhooks: commit offsets", "err", err)
	}
}

// announce publishes EndpointDisabled for e, keyed by the endpoint; its id
// is made of the endpoint and when it was disabled, so announcing one
// disabling again is a duplicate.
func (x *Dispatcher) announce(ctx context.Context, e Disabled) error {
	data, _ := json.Marshal(map[string]string{"endpointId": e.EndpointID.String(), "tenant": e.Tenant, "url": e.URL,
		"reason": e.Reason, "failingSince": e.FailingSince.UTC().Format(time.RFC3339Nano)})
	sum := sha256.Sum256([]byte(e.EndpointID.String() + "|" + e.DisabledAt.UTC().Format(time.RFC3339Nano)))
	n := notification.Note{ID: hex.EncodeToString(sum[:16]), Type: EndpointDisabled, Source: notification.SourceWebhooks,
		Time: e.DisabledAt, Subject: e.EndpointID.String(), Tenant: e.Tenant, Key: []byte(e.EndpointID.String()), Data: data}
	return x.cl.ProduceSync(ctx, n.Record(x.topic)).FirstErr()
}
