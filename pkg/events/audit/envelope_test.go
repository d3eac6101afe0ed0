package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/envelope"
	"github.com/paysched/paysched/pkg/payment"
)

// refEnvelope and refNotification are the consumer's former decoding
// (encoding/json into maps, which envelope.Change is): the reference
// envelope.Parse must agree with.
type refEnvelope = envelope.Change

func refStr(row map[string]any, k string) *string {
	if s, ok := row[k].(string); ok {
		return &s
	}
	return nil
}

// refLeft is the status an update left: its before image's, else the
// row's prev_status (nil: unknown).
func refLeft(e refEnvelope) any {
	if e.Before != nil {
		return e.Before["status"]
	}
	return e.After["prev_status"]
}

func refNotification(e refEnvelope) *kgo.Record {
	if e.Source.Table == "schedule_events" {
		return refScheduleNote(e)
	}
	if e.Source.Table != "payments" || e.After == nil {
		return nil
	}
	status, _ := e.After["status"].(string)
	var typ string
	switch {
	case e.Op == "r" && payment.Status(status).AtRest():
		typ = "paysched.payment." + strings.ToLower(status)
	case e.Op == "c" || e.Op == "r":
		typ = "paysched.payment.created"
	case e.Op == "u" && payment.Status(status).AtRest() && refLeft(e) != status:
		typ = "paysched.payment." + strings.ToLower(status)
	default:
		return nil
	}
	id, _ := e.After["id"].(string)
	// The id: what happened, never where it was read (the LSN).
	key := id + "|" + typ
	if typ != "paysched.payment.created" {
		attempt, _ := e.After["attempt"].(float64)
		var updated []byte
		if v, ok := e.After["updated_at"]; ok {
			updated, _ = json.Marshal(v)
		}
		key += fmt.Sprintf("|%d|%s", int64(attempt), updated)
	}
	sum := sha256.Sum256([]byte(key))
	data, _ := json.Marshal(map[string]any{
		"paymentId": id, "payer": e.After["payer"], "payee": e.After["payee"], "amount": e.After["amount_minor"],
		"currency": e.After["currency"], "status": status, "dueAt": e.After["due_time"], "attempt": e.After["attempt"],
		"gatewayRef": e.After["gateway_ref"], "deadLetterReason": e.After["dead_letter_reason"], "failureReason": e.After["failure_reason"],
	})
	return &kgo.Record{Key: []byte(id), Value: data, Headers: []kgo.RecordHeader{
		{Key: "ce_id", Value: []byte(hex.EncodeToString(sum[:16]))},
		{Key: "ce_type", Value: []byte(typ)},
		{Key: "ce_time", Value: []byte(time.UnixMilli(e.Source.TsMs).UTC().Format(time.RFC3339Nano))},
	}}
}

// rowFields are the row columns the consumer reads.
var rowFields = map[string]func(*envelope.Row) []byte{
	"id": func(r *envelope.Row) []byte { return r.ID }, "payment_id": func(r *envelope.Row) []byte { return r.PaymentID },
	"status": func(r *envelope.Row) []byte { return r.Status }, "new_status": func(r *envelope.Row) []byte { return r.NewStatus },
}

// agree reports how envelope.Parse and the reference differ on b ("" when
// they agree).
func agree(b []byte) string {
	got, err := envelope.Parse(b)
	var ref refEnvelope
	refErr := json.Unmarshal(b, &ref)
	var typeErr *json.UnmarshalTypeError
	if refErr != nil && err == nil && errors.As(refErr, &typeErr) && strings.HasPrefix(typeErr.Value, "number") &&
		typeErr.Type.Kind() == reflect.Float64 {
		// A number out of float64's range inside a row: the maps could not
		// hold it; the raw values can.
		return ""
	}
	if (err != nil) != (refErr != nil) {
		return fmt.Sprintf("error %v, reference error %v", err, refErr)
	}
	if err != nil {
		return ""
	}
	if got.Op != ref.Op || got.Source.Table != ref.Source.Table || got.Source.LSN != ref.Source.LSN || got.Source.TsMs != ref.Source.TsMs {
		return fmt.Sprintf("op/source %q %q %d %d, reference %q %q %d %d", got.Op, got.Source.Table, got.Source.LSN, got.Source.TsMs,
			ref.Op, ref.Source.Table, ref.Source.LSN, ref.Source.TsMs)
	}
	for _, side := range []struct {
		name string
		r    *envelope.Row
		m    map[string]any
	}{{"before", got.Before(), ref.Before}, {"after", got.After(), ref.After}} {
		if (side.r == nil) != (side.m == nil) {
			return fmt.Sprintf("%s: nil %v, reference nil %v", side.name, side.r == nil, side.m == nil)
		}
		if side.r == nil {
			continue
		}
		for k, f := range rowFields {
			a, b := envelope.StringOf(f(side.r)), refStr(side.m, k)
			if (a == nil) != (b == nil) || (a != nil && *a != *b) {
				return fmt.Sprintf("%s.%s: %v, reference %v", side.name, k, a, b)
			}
		}
	}
	n, rn := noteRecord(got), refNotification(ref)
	if (n == nil) != (rn == nil) {
		return fmt.Sprintf("notification %v, reference %v", n != nil, rn != nil)
	}
	if n == nil {
		return ""
	}
	if !bytes.Equal(n.Key, rn.Key) {
		return fmt.Sprintf("notification key %q, reference %q", n.Key, rn.Key)
	}
	for _, h := range rn.Headers {
		if v := header(n, h.Key); v != string(h.Value) {
			return fmt.Sprintf("header %s %q, reference %q", h.Key, v, h.Value)
		}
	}
	var a, r any
	if err := json.Unmarshal(n.Value, &a); err != nil {
		return fmt.Sprintf("notification body %s: %v", n.Value, err)
	}
	_ = json.Unmarshal(rn.Value, &r)
	if !reflect.DeepEqual(a, r) {
		return fmt.Sprintf("notification body %s, reference %s", n.Value, rn.Value)
	}
	return ""
}

func header(r *kgo.Record, k string) string {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

func TestParseEnvelopeAgreesWithEncodingJSON(t *testing.T) {
	cases := []string{
		`{"before":null,"after":{"id":"p1","status":"PENDING","amount_minor":1500,"payer":"a","payee":"b<c>&","currency":"USD","due_time":"2026-12-01T09:00:00Z","attempt":0,"gateway_ref":null},"source":{"table":"payments","lsn":42,"ts_ms":1796115600123},"op":"c","ts_ms":1}`,
		`{"before":{"id":"p1","status":"PROCESSING"},"after":{"id":"p1","status":"COMPLETED","gateway_ref":"ch_1","dead_letter_reason":null},"source":{"table":"payments","lsn":43,"ts_ms":5},"op":"u"}`,
		`{"before":{"id":"p1","status":"COMPLETED"},"after":{"id":"p1","status":"COMPLETED"},"source":{"table":"payments","lsn":44},"op":"u"}`,
		`{"before":null,"after":{"id":"p1","status":"COMPLETED","prev_status":"PROCESSING"},"source":{"table":"payments","lsn":45},"op":"u"}`,
		`{"before":null,"after":{"id":"p1","status":"COMPLETED","prev_status":"COMPLETED"},"source":{"table":"payments","lsn":46},"op":"u"}`,
		`{"before":null,"after":{"id":"p1","status":"CANCELLED","prev_status":null},"source":{"table":"payments","lsn":47},"op":"u"}`,
		`{"before":{"id":"p1"},"after":{"id":"p1","status":"FAILED"},"source":{"table":"payments","lsn":44},"op":"u"}`,
		`{"before":{"payment_id":"p1","attempt":1},"after":null,"source":{"table":"payment_attempts","lsn":45},"op":"d"}`,
		`{"after":{"payment_id":"p1","new_status":"PENDING","prev_status":"DEAD_LETTERED"},"source":{"table":"payment_actions","lsn":46},"op":"c"}`,
		` { "after" : { "id" : "p\u00e9\ud83d\ude00\ud800x\"\\\/\b\f\n\r\t" , "status" : "CANCELLED" } , "op" : "u" , "source" : { "table" : "payments" , "lsn" : -0 } } `,
		`{"after":{"id":5,"status":["x"],"amount_minor":12345678901234567890,"payer":{"b":1,"a":[true,false,null]}},"op":"c","source":{"table":"payments","lsn":1,"ts_ms":2}}`,
		`{"after":{"id":"x\xffy","status":"COMPLETED"},"op":"u","source":{"table":"payments","lsn":1}}`,
		`{"after":{"id":"a"},"after":{"status":"COMPLETED"},"op":"u","source":{"table":"payments"},"source":{"lsn":7}}`,
		`{"after":{"id":"a"},"after":null,"op":"c","source":{"table":"payments"}}`,
		`{"op":null,"source":null}`,
		`{"op":"c","source":{"table":"payments","lsn":1.5}}`,
		`{"op":"c","source":{"table":"payments","lsn":"1"}}`,
		`{"op":"c","source":{"table":"payments","lsn":1e3}}`,
		`{"op":5,"source":{"table":"payments"}}`,
		`{"before":[],"source":{"table":"payments"}}`,
		`{"source":[1]}`,
		`{"after":{"amount_minor":1e400,"id":"x"},"op":"c","source":{"table":"payments"}}`,
		`null`, `[]`, `{}`, `{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":"\x"}`, `{"a":"` + "\x01" + `"}`, `{"a" 1}`, `{"a":1,}`, `{"a":[1,]}`,
		`{"a":tru}`, `{"a":1}x`, `{"a":"\u12"}`, `{`, `{"a":[`, `{"a":{"b":`, `"x"`, ``, `{"op":"c"} {}`,
	}
	for _, f := range []string{"../cdc/testdata/create.golden", "../cdc/testdata/update.golden"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		cases = append(cases, lines[len(lines)-1])
	}
	for _, c := range cases {
		if d := agree([]byte(c)); d != "" {
			t.Errorf("%s: %s", c, d)
		}
	}
}

// FuzzParseEnvelope holds envelope.Parse to encoding/json's verdicts and
// values. Keys that match the envelope's only case-insensitively are
// outside the contract (encoding/json folds case for struct fields).
func FuzzParseEnvelope(f *testing.F) {
	f.Add([]byte(`{"before":{"id":"p1","status":"PROCESSING"},"after":{"id":"p1","status":"COMPLETED","amount_minor":5},"source":{"table":"payments","lsn":43,"ts_ms":5},"op":"u"}`))
	f.Add([]byte(`{"after":{"id":"\u00e9\ud800"},"op":"c","source":{"table":"payments","lsn":-1}}`))
	f.Add([]byte(`{"a":[1,{"b":null}],"op":"r","source":{"table":"payment_attempts"}}`))
	f.Add([]byte(`{"after":{"id":"p2","status":"COMPLETED"},"op":"r","source":{"table":"payments","lsn":7,"ts_ms":9}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if foldedKey(b) {
			t.Skip()
		}
		if d := agree(b); d != "" {
			t.Fatalf("%q: %s", b, d)
		}
	})
}

// foldedKey: some object key equals an envelope field name only when case
// is ignored, or is "payload", which Parse reads as the schema-ful form's
// envelope and the reference struct does not.
func foldedKey(b []byte) bool {
	names := []string{"before", "after", "op", "source", "table", "lsn", "ts_ms"}
	d := json.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := d.Token()
		if err != nil {
			return false
		}
		if s, ok := tok.(string); ok {
			if strings.EqualFold(s, "payload") {
				return true
			}
			for _, n := range names {
				if s != n && strings.EqualFold(s, n) {
					return true
				}
			}
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	v := []byte(`{"before":{"id":"01a22bc4-9473-765b-b6f2-7d4716ef6a5a","payer":"bench","payee":"payee-1009","amount_minor":109,"currency":"USD","due_time":"2026-11-30T09:23:59Z","run_at":"2026-11-30T09:23:59Z","status":"PENDING","attempt":0,"lease_until":null,"lease_owner":null,"last_error":null,"dead_letter_reason":null,"gateway_ref":null,"description":"","metadata":"{}","created_at":"2026-11-30T09:23:53.075263Z","updated_at":"2026-11-30T09:23:53.075263Z","retries":0,"probes":0},"after":{"id":"01a22bc4-9473-765b-b6f2-7d4716ef6a5a","payer":"bench","payee":"payee-1009","amount_minor":109,"currency":"USD","due_time":"2026-11-30T09:23:59Z","run_at":"2026-11-30T09:23:59Z","status":"PROCESSING","attempt":1,"lease_until":"2026-11-30T09:25:59.000295Z","lease_owner":"sweeper-vm-10291","last_error":null,"dead_letter_reason":null,"gateway_ref":null,"description":"","metadata":"{}","created_at":"2026-11-30T09:23:53.075263Z","updated_at":"2026-11-30T09:23:59.000295Z","retries":0,"probes":0},"source":{"version":"paysched-cdc-1","connector":"postgresql","name":"paysched","ts_ms":1796030639102,"snapshot":"false","db":"spike_1","sequence":"[null,\"100825488\"]","schema":"public","table":"payments","txId":768,"lsn":100825488,"xmin":null},"op":"u","ts_ms":1796030639259}`)
	b.Run("envelope.Parse", func(b *testing.B) {
		b.SetBytes(int64(len(v)))
		for b.Loop() {
			if _, err := envelope.Parse(v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("maps", func(b *testing.B) {
		b.SetBytes(int64(len(v)))
		for b.Loop() {
			var e refEnvelope
			if err := json.Unmarshal(v, &e); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestOccurrenceNotificationsNameTheirSchedule: a payment made by a
// recurring schedule notifies its scheduleId and occurrence key; a one-off's
// data has neither (it is as it always was).
func TestOccurrenceNotificationsNameTheirSchedule(t *testing.T) {
	for _, c := range []struct {
		after string
		want  []string
		not   []string
	}{
		{`{"id":"p1","status":"PENDING","schedule_id":"s1","occurrence":"2027-01-31T09:00:00"}`,
			[]string{`"scheduleId":"s1"`, `"occurrence":"2027-01-31T09:00:00"`}, nil},
		{`{"id":"p2","status":"PENDING","schedule_id":null,"occurrence":null}`, nil, []string{"scheduleId", "occurrence"}},
		{`{"id":"p3","status":"PENDING"}`, nil, []string{"scheduleId", "occurrence"}},
	} {
		e, err := envelope.Parse([]byte(`{"before":null,"after":` + c.after + `,"op":"c"}`))
		if err != nil {
			t.Fatal(err)
		}
		data := string(noteData(e.After(), "p", "PENDING"))
		for _, w := range c.want {
			if !strings.Contains(data, w) {
				t.Errorf("%s: data %s lacks %s", c.after, data, w)
			}
		}
		for _, n := range c.not {
			if strings.Contains(data, n) {
				t.Errorf("%s: data %s has %s", c.after, data, n)
			}
		}
	}
}

// refScheduleNote is a schedule event's notification read with
// encoding/json.
func refScheduleNote(e refEnvelope) *kgo.Record {
	if e.After == nil || (e.Op != "c" && e.Op != "r") {
		return nil
	}
	id, ok1 := e.After["schedule_id"].(string)
	kind, ok2 := e.After["kind"].(string)
	data, ok3 := e.After["data"].(string)
	n, ok4 := e.After["id"].(float64)
	if !ok1 || !ok2 || !ok3 || !ok4 || n != float64(int64(n)) || !json.Valid([]byte(data)) {
		return nil
	}
	typ := "paysched.schedule." + strings.ToLower(kind)
	sum := sha256.Sum256(fmt.Appendf(nil, "%s|%s|%d", id, typ, int64(n)))
	return &kgo.Record{Key: []byte(id), Value: []byte(data), Headers: []kgo.RecordHeader{
		{Key: "ce_id", Value: []byte(hex.EncodeToString(sum[:16]))},
		{Key: "ce_type", Value: []byte(typ)},
		{Key: "ce_source", Value: []byte("/paysched/schedules")},
		{Key: "ce_time", Value: []byte(time.UnixMilli(e.Source.TsMs).UTC().Format(time.RFC3339Nano))},
	}}
}

func TestScheduleEventsAreNotified(t *testing.T) {
	const data = `{"state": "PAUSED", "amount": 1250, "scheduleId": "0197a000-0000-7000-8000-000000000001"}`
	row := func(id, kind, data string) string {
		return fmt.Sprintf(`{"id":%s,"schedule_id":"0197a000-0000-7000-8000-000000000001","tenant":"acme","kind":%q,"actor":"payer","data":%q}`,
			id, kind, data)
	}
	for _, c := range []struct {
		name, op, after, typ string
	}{
		{"a pause", "c", row("7", "PAUSED", data), "paysched.schedule.paused"},
		{"a creation", "c", row("8", "CREATED", data), "paysched.schedule.created"},
		{"a snapshot, replayed", "r", row("9", "ENDED", data), "paysched.schedule.ended"},
		{"an update of the row is no event", "u", row("7", "PAUSED", data), ""},
		{"data that is not JSON", "c", row("7", "PAUSED", "{"), ""},
		{"no kind", "c", `{"id":7,"schedule_id":"s","data":"{}"}`, ""},
		{"an id that is no integer", "c", row("7.5", "PAUSED", data), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := []byte(fmt.Sprintf(`{"before":null,"after":%s,"source":{"table":"schedule_events","lsn":5,"ts_ms":1790000000000},"op":%q}`, c.after, c.op))
			if d := agree(b); d != "" {
				t.Fatalf("disagrees with encoding/json: %s", d)
			}
			e, err := envelope.Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			r := noteRecord(e)
			if c.typ == "" {
				if r != nil {
					t.Fatalf("notified %s", header(r, "ce_type"))
				}
				return
			}
			if r == nil {
				t.Fatal("no notification")
			}
			if got := header(r, "ce_type"); got != c.typ {
				t.Errorf("type %s, want %s", got, c.typ)
			}
			if header(r, "ce_tenant") != "acme" || string(r.Key) != "0197a000-0000-7000-8000-000000000001" || string(r.Value) != data {
				t.Errorf("tenant %q key %q data %s", header(r, "ce_tenant"), r.Key, r.Value)
			}
			if (header(r, "ce_replay") == "true") != (c.op == "r") {
				t.Errorf("replay header %q on op %s", header(r, "ce_replay"), c.op)
			}
			// The same event read again has the same id; another has another.
			again := noteRecord(e)
			other, _ := envelope.Parse(bytes.Replace(b, []byte(`"id":`), []byte(`"id":1`), 1))
			if header(again, "ce_id") != header(r, "ce_id") || header(noteRecord(other), "ce_id") == header(r, "ce_id") {
				t.Error("the id does not follow the event")
			}
		})
	}
}
