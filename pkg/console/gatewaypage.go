package console

import (
	"net/http"
	"time"

	"github.com/paysched/paysched/pkg/console/consoledb"
)

// The gateway page: answers by class, breaker history, pacing.

type breakerChange struct {
	At      time.Time
	Process string
	Open    bool
}

func (c *Console) gatewayPage(w http.ResponseWriter, r *http.Request, v *view) {
	ctx := r.Context()
	snap := c.cache.snapshot()
	now := c.now()
	var xs []time.Time
	var retry, ambig, decl []float64
	var tot, ok, dc, rt, am int64
	for _, s := range snap.Samples {
		n := float64(s.Succeeded + s.Declined + s.Retryable + s.Ambiguous)
		xs = append(xs, s.At)
		pct := func(k int64) float64 {
			if n == 0 {
				return 0
			}
			return 100 * float64(k) / n
		}
		retry, ambig, decl = append(retry, pct(s.Retryable)), append(ambig, pct(s.Ambiguous)), append(decl, pct(s.Declined))
		tot += s.Succeeded + s.Declined + s.Retryable + s.Ambiguous
		ok, dc, rt, am = ok+s.Succeeded, dc+s.Declined, rt+s.Retryable, am+s.Ambiguous
	}
	chart := lineChart("Gateway answers by class, last hour (% of attempts)", "%", now.Add(-history), now,
		[]series{{Name: "retryable", Class: "s2", X: xs, Y: retry}, {Name: "ambiguous", Class: "s1", X: xs, Y: ambig},
			{Name: "declined", Class: "s3", X: xs, Y: decl}})
	got, err := consoledb.New(c.db).BreakerChanges(ctx)
	if err != nil {
		c.dbFail(w, r, v, "breaker history", err)
		return
	}
	changes := make([]breakerChange, len(got))
	for i, b := range got {
		changes[i] = breakerChange(b)
	}
	hb, err := c.heartbeats(ctx, now)
	if err != nil {
		c.dbFail(w, r, v, "engine heartbeats", err)
		return
	}
	bs, err := c.buckets(ctx, now)
	if err != nil {
		c.dbFail(w, r, v, "rate buckets", err)
		return
	}
	v.Title, v.Refresh = "Gateway", 10
	v.Data = map[string]any{"Chart": chart, "Total": tot, "Succeeded": ok, "Declined": dc, "Retryable": rt, "Ambiguous": am,
		"Changes": changes, "Heartbeats": hb, "Buckets": bs}
	c.render(w, http.StatusOK, "gateway.html", v)
}
