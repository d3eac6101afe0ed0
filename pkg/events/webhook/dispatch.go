package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/kafka"
	"github.com/paysched/paysched/pkg/store"
)

// Group is the dispatcher's consumer group: it scales out by partition.
const Group = "paysched-webhooks"

// EndpointDisabled is the event type announcing a disabled endpoint.
const EndpointDisabled = "paysched.webhook.endpoint_disabled"

// tenantHeader names a notification's tenant when its key is not a
// payment (EndpointDisabled).
const tenantHeader = "ce_tenant"

// fanoutSQL makes one delivery per enabled endpoint of each notification's
// tenant that subscribes to its type; the tenant is the payment's (its
// payment_index row), or the record's own for events of no payment. A
// notification read again (a rebalance, a restart before the commit) hits
// the (endpoint, msg_id) key and makes nothing.
const fanoutSQL = `
INSERT INTO webhook_deliveries (endpoint_id, msg_id, event_type, payment_id, body, noted_at, next_at)
SELECT e.id, n.msg_id, n.type, n.payment_id, n.body, n.noted_at, now()
FROM unnest($1::text[], $2::text[], $3::uuid[], $4::bytea[], $5::timestamptz[], $6::text[])
         AS n(msg_id, type, payment_id, body, noted_at, tenant)
JOIN webhook_endpoints e
  ON e.enabled
 AND e.tenant = coalesce(nullif(n.tenant, ''), (SELECT pi.tenant FROM payment_index pi WHERE pi.id = n.payment_id))
 AND (e.event_types = '{}' OR n.type = ANY (e.event_types))
ON CONFLICT (endpoint_id, msg_id) DO NOTHING`

// Config is a dispatcher's.
type Config struct {
	Brokers   []string
	KafkaOpts []kgo.Opt
	Group     string
	Topics    kafka.Topics
	Egress    Egress
	// Slots: attempts at once (default 64).
	Slots int
	// Schedule: the retries' delays (default DefaultSchedule).
	Schedule Schedule
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
	case c.Slots < 0 || c.Slots > 10000:
		return fmt.Errorf("slots %d: want 1 to 10,000", c.Slots)
	}
	return nil
}

// Dispatcher reads the notifications into deliveries (the fan-out) and
// delivers them (the worker).
type Dispatcher struct {
	db     store.DB
	cl     *kgo.Client
	topic  string
	log    *slog.Logger
	worker *Worker
	m      struct {
		attempts *prometheus.CounterVec
		lag      prometheus.Histogram
		fanned   prometheus.Counter
		disabled prometheus.GaugeFunc
	}
}

// New makes a dispatcher; its metrics go to reg.
func New(cfg Config, db store.DB, reg prometheus.Registerer, log *slog.Logger) (*Dispatcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("webhook-dispatcher config: %w", err)
	}
	opts := []kgo.Opt{kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.WithLogger(kafka.ClientLogger(log)),
		kgo.ConsumeTopics(cfg.Topics.Notifications),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Committed by hand once the deliveries are written.
		kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.FetchMaxBytes(8 << 20),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	}
	cl, err := kgo.NewClient(append(opts, cfg.KafkaOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	d := &Dispatcher{db: db, cl: cl, topic: cfg.Topics.Notifications, log: log}
	d.m.attempts = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "paysched_webhook_attempts_total",
		Help: "Webhook delivery attempts by class: delivered, gone, throttled, rejected, broken, blocked."}, []string{"class"})
	d.m.lag = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "paysched_webhook_delivery_lag_seconds",
		Help:    "From the notification to its successful delivery.",
		Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 3600}})
	d.m.fanned = prometheus.NewCounter(prometheus.CounterOpts{Name: "paysched_webhook_notifications_total",
		Help: "Notifications read into deliveries (redeliveries included)."})
	d.m.disabled = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "paysched_webhook_endpoints_disabled",
		Help: "Endpoints disabled (410 Gone, or failing for 5 days)."}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var n int64
		_ = db.QueryRow(ctx, `SELECT count(*) FROM webhook_endpoints WHERE NOT enabled AND disabled_reason IS NOT NULL`).Scan(&n)
		return float64(n)
	})
	reg.MustRegister(d.m.attempts, d.m.lag, d.m.fanned, d.m.disabled)
	d.worker = &Worker{DB: db, Client: cfg.Egress.Client(), Slots: cfg.Slots, Schedule: cfg.Schedule,
		Lease: cfg.Egress.Timeout + 15*time.Second,
		Log:   log, OnDisabled: d.announce, OnAttempt: func(c Class, _, lag time.Duration) {
			d.m.attempts.WithLabelValues(string(c)).Inc()
			if c == Delivered {
				d.m.lag.Observe(lag.Seconds())
			}
		}}
	return d, nil
}

// Close leaves the group.
func (d *Dispatcher) Close() { d.cl.Close() }

// Run fans out and delivers until ctx ends.
func (d *Dispatcher) Run(ctx context.Context) error {
	errc := make(chan error, 2)
	go func() { errc <- d.fanout(ctx) }()
	go func() { errc <- d.worker.Run(ctx) }()
	err := <-errc
	if err2 := <-errc; err == nil {
		err = err2
	}
	return err
}

// fanout reads notifications into deliveries, committing offsets only
// after their deliveries are written.
func (d *Dispatcher) fanout(ctx context.Context) error {
	for {
		fs := d.cl.PollRecords(ctx, 2000)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			d.log.Warn("webhooks: fetch", "topic", t, "partition", p, "err", err)
		})
		recs := fs.Records()
		if len(recs) == 0 {
			continue
		}
		for {
			err := Fanout(ctx, d.db, recs)
			if err == nil {
				break
			}
			d.log.Warn("webhooks: fan out (retrying)", "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
		d.m.fanned.Add(float64(len(recs)))
		if err := d.cl.CommitRecords(ctx, recs...); err != nil && ctx.Err() == nil {
			// Read again after a rebalance: the key drops the repeat.
			d.log.Warn("webhooks: commit offsets", "err", err)
		}
	}
}

// Fanout writes the deliveries of notification records.
func Fanout(ctx context.Context, db store.DB, recs []*kgo.Record) error {
	n := len(recs)
	ids, types, tenants := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	pays, bodies, noted := make([]*uuid.UUID, 0, n), make([][]byte, 0, n), make([]time.Time, 0, n)
	for _, r := range recs {
		var id, typ, at, tenant string
		for _, h := range r.Headers {
			switch h.Key {
			case "ce_id":
				id = string(h.Value)
			case "ce_type":
				typ = string(h.Value)
			case "ce_time":
				at = string(h.Value)
			case tenantHeader:
				tenant = string(h.Value)
			}
		}
		if id == "" || typ == "" || strings.ContainsRune(id, '.') {
			continue // not a notification a webhook carries
		}
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			t = r.Timestamp
		}
		var pay *uuid.UUID
		if p, err := uuid.ParseBytes(r.Key); err == nil {
			pay = &p
		}
		body, err := Body(typ, t, r.Value)
		if err != nil {
			continue
		}
		ids, types, tenants = append(ids, id), append(types, typ), append(tenants, tenant)
		pays, bodies, noted = append(pays, pay), append(bodies, body), append(noted, t)
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := db.Exec(ctx, fanoutSQL, ids, types, pays, bodies, noted, tenants); err != nil {
		return fmt.Errorf("fan out %d notifications: %w", len(ids), err)
	}
	return nil
}

// Body is a webhook's JSON body (the spec's shape): the event type, when
// it happened, and the notification's data as it came.
func Body(typ string, at time.Time, data []byte) ([]byte, error) {
	if !json.Valid(data) {
		return nil, fmt.Errorf("notification data is not JSON")
	}
	t, _ := json.Marshal(typ)
	b := make([]byte, 0, len(data)+96)
	b = append(b, `{"type":`...)
	b = append(b, t...)
	b = append(b, `,"timestamp":"`...)
	b = at.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","data":`...)
	b = append(b, data...)
	return append(b, '}'), nil
}

// announce publishes EndpointDisabled for e, keyed by the endpoint; its id
// is the same for the same disabling, so a repeat is a duplicate.
func (d *Dispatcher) announce(ctx context.Context, e Disabled) error {
	data, _ := json.Marshal(map[string]string{"endpointId": e.EndpointID.String(), "tenant": e.Tenant, "url": e.URL,
		"reason": e.Reason, "failingSince": e.FailingSince.UTC().Format(time.RFC3339Nano)})
	sum := sha256.Sum256([]byte(e.EndpointID.String() + "|" + e.FailingSince.UTC().Format(time.RFC3339Nano)))
	now := time.Now().UTC()
	rec := &kgo.Record{Topic: d.topic, Key: []byte(e.EndpointID.String()), Value: data, Headers: []kgo.RecordHeader{
		{Key: "ce_specversion", Value: []byte("1.0")},
		{Key: "ce_id", Value: []byte(hex.EncodeToString(sum[:16]))},
		{Key: "ce_type", Value: []byte(EndpointDisabled)},
		{Key: "ce_source", Value: []byte("/paysched/webhooks")},
		{Key: "ce_time", Value: []byte(now.Format(time.RFC3339Nano))},
		{Key: "ce_subject", Value: []byte(e.EndpointID.String())},
		{Key: tenantHeader, Value: []byte(e.Tenant)},
		{Key: "content-type", Value: []byte("application/json")},
	}}
	return d.cl.ProduceSync(ctx, rec).FirstErr()
}
