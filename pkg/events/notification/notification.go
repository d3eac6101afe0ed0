// Package notification is the one home of the notification format: a
// CloudEvent in Kafka's binary mode (the event's attributes as ce_*
// headers, its data as the record's value, JSON), as the audit-consumer
// publishes a payment's and the webhook-dispatcher an endpoint's, and as
// the webhook-dispatcher, payctl and the tools read them. docs/EVENTS.md,
// "Notifications".
package notification

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The headers: CloudEvents' binary mode for Kafka, and the tenant.
const (
	HeaderSpecVersion = "ce_specversion"
	HeaderID          = "ce_id"
	HeaderType        = "ce_type"
	HeaderSource      = "ce_source"
	HeaderTime        = "ce_time"
	HeaderSubject     = "ce_subject"
	// HeaderTenant is the tenant the event belongs to (an extension
	// attribute): whose webhook endpoints receive it.
	HeaderTenant = "ce_tenant"
	// HeaderReplay marks a notification published again from a snapshot
	// (cdc --resync), "true": its receivers may have it already (an
	// extension attribute; absent on the first publication).
	HeaderReplay      = "ce_replay"
	HeaderContentType = "content-type"
)

// The sources.
const (
	SourcePayments = "/paysched/payments"
	SourceWebhooks = "/paysched/webhooks"
	// SourceSchedules is the source of a recurring schedule's events.
	SourceSchedules = "/paysched/schedules"
)

// TypePrefix starts every payment notification's type
// ("paysched.payment.completed").
const TypePrefix = "paysched.payment."

// Created is the type of a payment's creation.
const Created = TypePrefix + "created"

// ScheduleTypePrefix starts every schedule notification's type
// ("paysched.schedule.paused"): created, updated, paused, resumed, ended
// and cancelled.
const ScheduleTypePrefix = "paysched.schedule."

// ScheduleEventID is a schedule notification's id: its schedule, its type
// and the event's own number (schedule_events.id), so the same event read
// again (a redelivery, `cdc --resync`) has the same id.
func ScheduleEventID(scheduleID, typ string, event int64) string {
	sum := sha256.Sum256([]byte(scheduleID + "|" + typ + "|" + strconv.FormatInt(event, 10)))
	return hex.EncodeToString(sum[:16])
}

// Note is one notification.
type Note struct {
	// ID is the CloudEvent id: the receiver's idempotency key (webhook-id),
	// the same whenever the same event is published again.
	ID      string
	Type    string
	Source  string
	Time    time.Time
	Subject string
	Tenant  string
	// Key is the record's key: the payment's id (or the endpoint's).
	Key []byte
	// Data is the event's JSON data.
	Data []byte
	// Replay says the notification is published again from a snapshot
	// (HeaderReplay): the webhook-dispatcher asks whether it delivered it
	// before it attempts it.
	Replay bool
}

// Record is n as a record of topic.
func (n Note) Record(topic string) *kgo.Record {
	h := []kgo.RecordHeader{
		{Key: HeaderSpecVersion, Value: []byte("1.0")},
		{Key: HeaderID, Value: []byte(n.ID)},
		{Key: HeaderType, Value: []byte(n.Type)},
		{Key: HeaderSource, Value: []byte(n.Source)},
		{Key: HeaderTime, Value: n.Time.UTC().AppendFormat(nil, time.RFC3339Nano)},
		{Key: HeaderSubject, Value: []byte(n.Subject)},
	}
	if n.Tenant != "" {
		h = append(h, kgo.RecordHeader{Key: HeaderTenant, Value: []byte(n.Tenant)})
	}
	if n.Replay {
		h = append(h, kgo.RecordHeader{Key: HeaderReplay, Value: []byte("true")})
	}
	h = append(h, kgo.RecordHeader{Key: HeaderContentType, Value: []byte("application/json")})
	return &kgo.Record{Topic: topic, Key: n.Key, Value: n.Data, Headers: h}
}

// Decode reads a notification record; ok is false when r is not one (no
// id or type). Data and Key alias the record. A ce_time that does not parse
// falls back to the record's timestamp.
func Decode(r *kgo.Record) (Note, bool) {
	n := Note{Key: r.Key, Data: r.Value}
	var at []byte
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderID:
			n.ID = string(h.Value)
		case HeaderType:
			n.Type = string(h.Value)
		case HeaderSource:
			n.Source = string(h.Value)
		case HeaderTime:
			at = h.Value
		case HeaderSubject:
			n.Subject = string(h.Value)
		case HeaderTenant:
			n.Tenant = string(h.Value)
		case HeaderReplay:
			n.Replay = string(h.Value) == "true"
		}
	}
	if n.ID == "" || n.Type == "" {
		return Note{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, string(at))
	if err != nil {
		t = r.Timestamp
	}
	n.Time = t
	return n, true
}

// Header returns the first header named key of r (nil when none): for
// readers that want one attribute only (a watcher counting ids).
func Header(r *kgo.Record, key string) []byte {
	for _, h := range r.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

// PaymentID is a payment notification's id: derived from what the event
// says happened, never from where it was read (the log position), so a
// change published again, or re-read after `cdc --resync`, has the same
// id, and a receiver deduplicating on webhook-id fulfils once. A payment
// is created once; it comes to rest in a status at an attempt, and its
// updated_at tells two rests at one attempt apart (a hold, a release and
// a hold again).
func PaymentID(paymentID, typ string, attempt int64, updatedAt []byte) string {
	var b bytes.Buffer
	b.WriteString(paymentID)
	b.WriteByte('|')
	b.WriteString(typ)
	if typ != Created {
		b.WriteByte('|')
		b.WriteString(strconv.FormatInt(attempt, 10))
		b.WriteByte('|')
		b.Write(updatedAt)
	}
	sum := sha256.Sum256(b.Bytes())
	return hex.EncodeToString(sum[:16])
}

// Body is a webhook's JSON body (the Standard Webhooks shape): the event
// type, when it happened, and the notification's data as it came. data
// must be JSON.
func Body(typ string, at time.Time, data []byte) []byte {
	b := make([]byte, 0, len(data)+len(typ)+64)
	b = append(b, `{"type":`...)
	t, _ := json.Marshal(typ)
	b = append(b, t...)
	b = append(b, `,"timestamp":"`...)
	b = at.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","data":`...)
	b = append(b, data...)
	return append(b, '}')
}

// String is n in one line (payctl events tail).
func (n Note) String() string {
	return fmt.Sprintf("%s  %-32s %s  %s", n.Time.UTC().Format(time.RFC3339Nano), n.Type, n.Key, n.Data)
}
