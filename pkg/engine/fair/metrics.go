package fair

import (
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paysched/paysched/pkg/store"
)

// Per-tenant metrics have bounded cardinality: the TopN tenants by claims
// get their own series, every other tenant is summed into "other".
const (
	// TopN is how many tenants get series of their own.
	TopN = 10
	// other is the label of the rest.
	other = "other"
	// maxTracked bounds the tenants counted one by one; later ones are
	// counted as other at once.
	maxTracked = 10_000
)

type tenantStats struct {
	claimed uint64
	// lateMax is the largest lateness (due to claim) of a first attempt
	// since the last scrape.
	lateMax float64
}

// observe counts claims by tenant (under s.mu).
func (s *Scheduler) observe(cs []store.Claimed, now time.Time) {
	for _, c := range cs {
		st := s.stats[c.Tenant]
		if st == nil {
			if len(s.stats) >= maxTracked {
				st = s.stats[other]
			} else {
				st = &tenantStats{}
				s.stats[c.Tenant] = st
			}
		}
		st.claimed++
		if c.Attempt == 1 {
			st.lateMax = max(st.lateMax, now.Sub(c.DueTime).Seconds())
		}
	}
}

var (
	claimedDesc = prometheus.NewDesc("paysched_tenant_claimed_total",
		"Payments claimed per tenant: the top tenants by claims, the rest as tenant=\"other\".", []string{"tenant"}, nil)
	inflightDesc = prometheus.NewDesc("paysched_tenant_inflight",
		"Payments this sweeper claimed and has no outcome for yet, per tenant (top tenants, the rest as other).", []string{"tenant"}, nil)
	latenessDesc = prometheus.NewDesc("paysched_tenant_lateness_max_seconds",
		"Largest due-to-claim lateness of a first attempt since the last scrape, per tenant (top tenants, the rest as other).", []string{"tenant"}, nil)
	settlesDesc = prometheus.NewDesc("paysched_fair_settles_total",
		"Tenants found short and handed to a settle (outcome=queued), or kept from one by the claim's peek (outcome=spared).", []string{"outcome"}, nil)
)

// Describe implements prometheus.Collector.
func (s *Scheduler) Describe(ch chan<- *prometheus.Desc) {
	ch <- claimedDesc
	ch <- inflightDesc
	ch <- latenessDesc
	ch <- settlesDesc
}

// Collect implements prometheus.Collector: the top tenants by claims, and
// the rest summed as "other".
func (s *Scheduler) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.stats))
	for t := range s.stats {
		if t != other {
			names = append(names, t)
		}
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := s.stats[names[i]].claimed, s.stats[names[j]].claimed
		return a > b || a == b && names[i] < names[j]
	})
	top := map[string]bool{}
	for i, t := range names {
		if i < TopN {
			top[t] = true
		}
	}
	var rest tenantStats
	if o := s.stats[other]; o != nil {
		rest = *o
	}
	restInflight := 0
	for t, st := range s.stats {
		if top[t] {
			ch <- prometheus.MustNewConstMetric(claimedDesc, prometheus.CounterValue, float64(st.claimed), t)
			ch <- prometheus.MustNewConstMetric(inflightDesc, prometheus.GaugeValue, float64(s.inflight[t]), t)
			ch <- prometheus.MustNewConstMetric(latenessDesc, prometheus.GaugeValue, st.lateMax, t)
		} else if t != other {
			rest.claimed += st.claimed
			rest.lateMax = max(rest.lateMax, st.lateMax)
		}
		st.lateMax = 0
	}
	for t, n := range s.inflight {
		if !top[t] {
			restInflight += n
		}
	}
	ch <- prometheus.MustNewConstMetric(claimedDesc, prometheus.CounterValue, float64(rest.claimed), other)
	ch <- prometheus.MustNewConstMetric(inflightDesc, prometheus.GaugeValue, float64(restInflight), other)
	ch <- prometheus.MustNewConstMetric(latenessDesc, prometheus.GaugeValue, rest.lateMax, other)
	ch <- prometheus.MustNewConstMetric(settlesDesc, prometheus.CounterValue, float64(s.queued.Load()), "queued")
	ch <- prometheus.MustNewConstMetric(settlesDesc, prometheus.CounterValue, float64(s.spared.Load()), "spared")
}
