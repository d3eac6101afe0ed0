package executor

import (
	"fmt"
	"testing"
	"time"
)

// The pacer grants a payee's burst at once, then one turn per interval,
// each deferred payment its own turn; a payment coming back at its turn is
// charged on it (not given another); other payees are not affected.
func TestPayeePacerSpreadsTurns(t *testing.T) {
	p := newPayeePacer(10, 2) // 10/s, burst 2: a turn every 100 ms
	now := time.Unix(1000, 0)
	var turns []time.Time
	for i := range 6 {
		turns = append(turns, p.take(fmt.Sprint("pay-", i), "hot", now))
	}
	for i, turn := range turns {
		want := now
		if i >= 2 {
			want = now.Add(time.Duration(i-1) * 100 * time.Millisecond)
		}
		if !turn.Equal(want) {
			t.Fatalf("payment %d: turn %s, want %s (turns %v)", i, turn.Sub(now), want.Sub(now), turns)
		}
	}
	if got := p.take("other", "cold", now); !got.Equal(now) {
		t.Fatalf("another payee waits %s", got.Sub(now))
	}
	// pay-3 comes back at its turn: charged now, no new turn.
	if got := p.take("pay-3", "hot", turns[3]); !got.Equal(turns[3]) {
		t.Fatalf("pay-3 back at its turn was deferred to %s", got.Sub(now))
	}
	// Early, it keeps its turn.
	if got := p.take("pay-4", "hot", now); !got.Equal(turns[4]) {
		t.Fatalf("pay-4 back early got %s, want its turn %s", got.Sub(now), turns[4].Sub(now))
	}
	if newPayeePacer(0, 1).take("x", "y", now) != now {
		t.Fatal("no rate: never deferred")
	}
}
