package paymentsserver_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// scheduleBody is a create body: a monthly plan from a local start.
func scheduleBody(rule, start, zone string, extra string) string {
	return fmt.Sprintf(`{"payee":"landlord","amount":120000,"currency":"EUR","rrule":%q,"start":%q,"timeZone":%q%s}`, rule, start, zone, extra)
}

// TestSchedulesOverREST: a schedule made over REST is previewed, listed,
// planned into ordinary payments that carry its id and their keys, paused
// (withdrawing what was made ahead), resumed and cancelled; bad plans are
// refused field by field, a key reused with another body conflicts, and
// another payer sees nothing of it. Every response is checked against the
// OpenAPI document.
func TestSchedulesOverREST(t *testing.T) {
	e := start(t)
	tok, other := token(t, "rita"), token(t, "mallory")
	from := time.Now().UTC().Add(48 * time.Hour).Format("2006-01-02T15:04")

	// Refused plans, each naming its field.
	for _, c := range []struct {
		body  string
		field string
	}{
		{scheduleBody("FREQ=HOURLY", from, "Europe/Paris", ""), "rrule"},
		{scheduleBody("FREQ=MONTHLY;BYDAY=2WE,FR", from, "Europe/Paris", ""), "rrule"},
		{scheduleBody("FREQ=MONTHLY", "2027-02-30T09:00", "Europe/Paris", ""), "start"},
		{scheduleBody("FREQ=DAILY", "0001-01-01T09:00", "Europe/Paris", ""), "start"},
		{scheduleBody("FREQ=MONTHLY", from, "Mars/Olympus", ""), "timeZone"},
		{scheduleBody("FREQ=MONTHLY", from, "Europe/Paris", `,"calendar":"XX"`), "calendar"},
		{scheduleBody("FREQ=MONTHLY", from, "Europe/Paris", `,"catchUpBound":1000`), "catchUpBound"},
		{`{"payee":"","amount":0,"rrule":"FREQ=DAILY","start":"` + from + `","timeZone":"UTC"}`, "amount"},
	} {
		r := e.do("POST", "/v1/schedules", tok, key("bad-"+c.field), c.body)
		if r.code != http.StatusBadRequest || !r.fields(t)[c.field] {
			t.Fatalf("%s: %d %s, want 400 naming %s", c.body, r.code, r.body, c.field)
		}
	}
	if r := e.do("POST", "/v1/schedules", tok, key("ended"), scheduleBody("FREQ=DAILY;COUNT=2", time.Now().UTC().AddDate(-2, 0, 0).Format("2006-01-02T15:04"), "UTC", "")); r.code != 400 || r.reason(t) != "NO_OCCURRENCE" {
		t.Fatalf("a rule with nothing left: %d %s", r.code, r.body)
	}

	// Preview before making it: Jan 31 under clamp, with the month end said.
	// (A year ahead of whenever the test runs: a fixed year would pass
	// and leave nothing to preview.)
	year := time.Now().Year() + 2
	febEnd := fmt.Sprintf("%d-02-%02d", year, time.Date(year, 3, 0, 0, 0, 0, 0, time.UTC).Day())
	r := e.do("POST", "/v1/schedules:preview", tok, nil,
		fmt.Sprintf(`{"rrule":"FREQ=MONTHLY;COUNT=3","start":"%d-01-31T09:00","timeZone":"Europe/Paris","count":3}`, year))
	if r.code != 200 {
		t.Fatalf("preview: %d %s", r.code, r.body)
	}
	occ := r.json(t)["occurrences"].([]any)
	feb := occ[1].(map[string]any)
	if len(occ) != 3 || feb["nominal"] != febEnd+"T09:00:00" || feb["moved"].([]any)[0] != "MONTH_END" || feb["dueAt"] != febEnd+"T08:00:00Z" {
		t.Fatalf("preview: %s", r.body)
	}

	// Make one: daily, so the planner makes some at once.
	body := scheduleBody("FREQ=DAILY", from, "Europe/Paris", `,"description":"rent"`)
	r = e.do("POST", "/v1/schedules", tok, key("rent-1"), body)
	if r.code != http.StatusCreated {
		t.Fatalf("create: %d %s", r.code, r.body)
	}
	sc := r.json(t)
	id := sc["scheduleId"].(string)
	if sc["state"] != "SCHEDULE_STATE_ACTIVE" || sc["monthEnd"] != "MONTH_END_POLICY_CLAMP" || sc["catchUp"] != "CATCH_UP_POLICY_SKIP_MISSED" {
		t.Fatalf("created: %s", r.body)
	}
	if r := e.do("POST", "/v1/schedules", tok, key("rent-1"), body); r.code != 201 || r.header.Get("Idempotent-Replayed") != "true" || r.json(t)["scheduleId"] != id {
		t.Fatalf("replay: %d %v %s", r.code, r.header, r.body)
	}
	if r := e.do("POST", "/v1/schedules", tok, key("rent-1"), scheduleBody("FREQ=WEEKLY", from, "Europe/Paris", "")); r.code != http.StatusConflict {
		t.Fatalf("key reused: %d %s", r.code, r.body)
	}

	// The planner (every replica runs one) makes the occurrences within
	// the horizon as ordinary payments.
	deadline := time.Now().Add(30 * time.Second)
	for e.count(`SELECT count(*) FROM payments WHERE schedule_id = $1`, id) < 30 {
		if time.Now().After(deadline) {
			t.Fatalf("the planner made %d occurrences in 30 s", e.count(`SELECT count(*) FROM payments WHERE schedule_id = $1`, id))
		}
		time.Sleep(50 * time.Millisecond)
	}
	r = e.do("GET", "/v1/schedules/"+id, tok, nil, "")
	if r.code != 200 {
		t.Fatalf("get: %d %s", r.code, r.body)
	}
	got := r.json(t)
	first := got["occurrences"].([]any)[0].(map[string]any)
	p := e.do("GET", "/v1/scheduled-payments/"+first["paymentId"].(string), tok, nil, "")
	if p.code != 200 || p.json(t)["scheduleId"] != id || p.json(t)["occurrence"] != first["occurrence"] || p.json(t)["description"] != "rent" {
		t.Fatalf("an occurrence's payment: %d %s", p.code, p.body)
	}
	if r := e.do("GET", "/v1/schedules/"+id, other, nil, ""); r.code != http.StatusNotFound {
		t.Fatalf("another payer's get: %d", r.code)
	}
	if r := e.do("POST", "/v1/schedules/"+id+":pause", other, nil, `{}`); r.code != http.StatusNotFound {
		t.Fatalf("another payer's pause: %d", r.code)
	}
	if r := e.do("GET", "/v1/schedules", tok, nil, ""); r.code != 200 || len(r.json(t)["schedules"].([]any)) != 1 {
		t.Fatalf("list: %d %s", r.code, r.body)
	}

	// A change of amount withdraws what was made ahead at the old one; the
	// planner makes them again at the new one, each key once.
	r = e.do("PUT", "/v1/schedules/"+id, tok, nil,
		`{"payee":"landlord","amount":130000,"currency":"EUR","rrule":"FREQ=DAILY","start":"`+from+`","timeZone":"Europe/Paris","description":"rent"}`)
	if r.code != 200 || r.json(t)["withdrawn"].(float64) < 30 || r.json(t)["schedule"].(map[string]any)["amount"].(float64) != 130000 {
		t.Fatalf("update: %d %s", r.code, r.body)
	}
	deadline = time.Now().Add(30 * time.Second)
	for e.count(`SELECT count(*) FROM payments WHERE schedule_id = $1 AND amount_minor = 130000 AND status = 'PENDING'`, id) < 30 {
		if time.Now().After(deadline) {
			t.Fatal("the planner did not make the occurrences again at the new amount in 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := e.count(`SELECT count(*) FROM (SELECT 1 FROM payments WHERE schedule_id = $1 AND status <> 'CANCELLED'
		GROUP BY occurrence HAVING count(*) > 1) d`, id); n != 0 {
		t.Fatalf("%d occurrences have two live payments after the change", n)
	}
	if r := e.do("PUT", "/v1/schedules/"+id, tok, nil, `{"payee":"landlord","amount":1,"rrule":"FREQ=SECONDLY","start":"`+from+`","timeZone":"UTC"}`); r.code != 400 || !r.fields(t)["rrule"] {
		t.Fatalf("a bad change: %d %s", r.code, r.body)
	}

	// Pause withdraws what was made ahead; a second pause is refused;
	// resume and cancel; cancel again answers the same.
	r = e.do("POST", "/v1/schedules/"+id+":pause", tok, nil, `{}`)
	if r.code != 200 || r.json(t)["withdrawn"].(float64) < 30 || r.json(t)["schedule"].(map[string]any)["state"] != "SCHEDULE_STATE_PAUSED" {
		t.Fatalf("pause: %d %s", r.code, r.body)
	}
	if n := e.count(`SELECT count(*) FROM payments WHERE schedule_id = $1 AND status = 'PENDING'`, id); n != 0 {
		t.Fatalf("%d occurrences still PENDING after the pause", n)
	}
	if r := e.do("POST", "/v1/schedules/"+id+":pause", tok, nil, `{}`); r.code != 400 || r.reason(t) != "SCHEDULE_STATE" {
		t.Fatalf("pause twice: %d %s", r.code, r.body)
	}
	if r := e.do("POST", "/v1/schedules/"+id+":resume", tok, nil, `{}`); r.code != 200 {
		t.Fatalf("resume: %d %s", r.code, r.body)
	}
	if r := e.do("POST", "/v1/schedules/"+id+":cancel", tok, nil, `{}`); r.code != 200 {
		t.Fatalf("cancel: %d %s", r.code, r.body)
	}
	if r := e.do("POST", "/v1/schedules/"+id+":cancel", tok, nil, `{}`); r.code != 200 || r.json(t)["schedule"].(map[string]any)["state"] != "SCHEDULE_STATE_CANCELLED" {
		t.Fatalf("cancel twice: %d %s", r.code, r.body)
	}
	var pending int
	if err := e.db.QueryRow(context.Background(), `SELECT count(*) FROM payments WHERE schedule_id = $1 AND status = 'PENDING'`, id).Scan(&pending); err != nil || pending != 0 {
		t.Fatalf("%d PENDING after the cancel (%v)", pending, err)
	}
	if r := e.do("POST", "/v1/schedules:preview", tok, nil, `{"scheduleId":"`+id+`","count":2}`); r.code != 200 || len(r.json(t)["occurrences"].([]any)) != 2 {
		t.Fatalf("preview of a schedule: %d %s", r.code, r.body)
	}
}
