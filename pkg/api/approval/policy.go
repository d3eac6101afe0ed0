// Package approval is four eyes for operators, whatever their channel:
// every move of a payment and every change of a tenant's limits an
// operator makes, from the console or from admin-api's gRPC and REST, is a
// request. The policy says whether one admin may act alone; otherwise a
// second identity approves or rejects it. A request pins the payments it
// acts on (status and attempt) and expires; a runner applies it, fenced,
// skipping any payment changed since. The database holds the admin role to
// it (0026): a move not backed by a running, approved request is refused.
package approval

import (
	"errors"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/paysched/paysched/pkg/payment"
)

// Actions are the payment actions a request may take, by name, and the
// status each acts on.
var Actions = map[string]payment.Status{
	"REDRIVE": payment.DeadLettered, "RESOLVE": payment.DeadLettered, "CANCEL": payment.DeadLettered,
	"HOLD": payment.Pending, "CANCEL_PENDING": payment.Pending, "RESCHEDULE": payment.Pending, "RUN_NOW": payment.Pending,
	"RELEASE": payment.Held, "CANCEL_HELD": payment.Held,
}

// SetLimits is the action of a tenant limits request.
const SetLimits = "SET_LIMITS"

// Policy says when an operator may act alone. The default (Strict) lets
// one admin hold a payment (it stops money, it moves none) and recover an
// endpoint's failed webhooks (it sends again what was sent, within the
// endpoint's caps), and nothing else: every money move, every limit change
// and every secret rotation needs a second identity.
type Policy struct {
	// Single are the actions one admin may take alone, each on one
	// payment within the thresholds below.
	Single map[string]bool
	// Amount (minor units of the payment's currency): a single action on
	// a payment of at least this amount, or one taking the operator's
	// running total in that currency over Window to it, needs a second
	// identity. Amounts overrides it per currency: amounts are only ever
	// compared within one currency.
	Amount  int64
	Amounts map[string]int64
	// Window and Count: an operator's actions that ran alone in the
	// window are counted, and past Count the next needs a second
	// identity, as does one past the running total in its currency.
	Window time.Duration
	Count  int
	// Expiry is how long a request waits to be decided and run; after it,
	// it does nothing (EXPIRED).
	Expiry time.Duration
}

// Strict is the default policy: every money move and every limit change
// needs a second admin.
func Strict() Policy {
	return Policy{Single: map[string]bool{"HOLD": true, Recover: true}, Amount: 100000, Window: time.Hour, Count: 10, Expiry: 24 * time.Hour}
}

// Validate checks the policy.
func (p *Policy) Validate() error {
	switch {
	case p.Amount < 0:
		return fmt.Errorf("approval: the amount must not be negative, got %d", p.Amount)
	case p.Window <= 0 || p.Count < 0:
		return fmt.Errorf("approval: the window must be positive and the count not negative, got %s and %d", p.Window, p.Count)
	case p.Expiry < time.Minute || p.Expiry > 30*24*time.Hour:
		return fmt.Errorf("approval: requests must expire after between 1m and 720h, got %s", p.Expiry)
	}
	for cur, a := range p.Amounts {
		if !payment.KnownCurrency(cur) || a < 0 {
			return fmt.Errorf("approval: amount %s=%d: want an ISO 4217 code and a non-negative amount", cur, a)
		}
	}
	for a := range p.Single {
		if _, ok := Actions[a]; !ok && a != Recover {
			return fmt.Errorf("approval: %q is not an action one admin may take alone (want some of %s; limit changes and rotations always take two)",
				a, strings.Join(actionNames(), ", "))
		}
	}
	return nil
}

// Relaxed reports whether the policy lets one admin move money alone.
func (p *Policy) Relaxed() bool {
	for a, ok := range p.Single {
		if ok && a != "HOLD" && a != Recover {
			return true
		}
	}
	return false
}

func actionNames() []string {
	out := []string{Recover}
	for a := range Actions {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// threshold is the approval amount of currency cur, in its minor units.
func (p *Policy) threshold(cur string) int64 {
	if t, ok := p.Amounts[cur]; ok {
		return t
	}
	return p.Amount
}

// Running is what an operator's actions that ran alone add up to over
// the window: how many, and the total in each currency.
type Running struct {
	Count  int
	Totals map[string]int64
}

// Needs reports whether action on s needs a second identity: any action
// the policy does not let one admin take; any on more than one payment;
// one on a payment of at least its currency's amount; and one that takes
// the operator's running totals over the window past the count or the
// total in its currency, so that splitting an action does not dodge it.
func (p *Policy) Needs(action string, s Selection, r Running) bool {
	if !p.Single[action] || len(s.IDs) > 1 || r.Count+1 > p.Count {
		return true
	}
	for cur, a := range s.Amounts {
		if a.Max >= p.threshold(cur) || r.Totals[cur]+a.Total >= p.threshold(cur) {
			return true
		}
	}
	return false
}

// Flags are the policy's command-line flags (admin-api).
type Flags struct {
	single  string
	amount  int64
	amounts string
	window  time.Duration
	count   int
	expiry  time.Duration
}

// RegisterFlags adds the policy's flags to fs.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.single, "approval-single", "HOLD,RECOVER", "comma-separated actions one admin may take alone, on one payment within the thresholds (REDRIVE, RESOLVE, CANCEL, HOLD, RELEASE, CANCEL_PENDING, CANCEL_HELD, RESCHEDULE, RUN_NOW; RECOVER: an endpoint's failed webhooks); every other, every limit change and every secret rotation needs a second admin. A money move among them is refused outside --dev")
	fs.Int64Var(&f.amount, "approval-amount", 100000, "minor units of the payment's currency: an action on one payment of at least this amount, or one taking the operator's running total in that currency to it, needs a second admin")
	fs.StringVar(&f.amounts, "approval-amounts", "", "per-currency approval amounts overriding --approval-amount, in each currency's minor units: EUR=100000,JPY=15000000")
	fs.DurationVar(&f.window, "approval-window", time.Hour, "window of an operator's running totals: their actions taken alone in it are counted and totalled per currency")
	fs.IntVar(&f.count, "approval-count", 10, "actions one admin may take alone per --approval-window; the next needs a second admin")
	fs.DurationVar(&f.expiry, "approval-expiry", 24*time.Hour, "how long a request waits to be approved and run; then it expires and does nothing")
	return f
}

// Policy is the configured policy. Outside development, it refuses to let
// one admin move money alone: the strict default, or stricter.
func (f *Flags) Policy(dev bool) (Policy, error) {
	p := Policy{Single: map[string]bool{}, Amount: f.amount, Window: f.window, Count: f.count, Expiry: f.expiry}
	for _, a := range strings.Split(f.single, ",") {
		if a = strings.ToUpper(strings.TrimSpace(a)); a != "" {
			p.Single[a] = true
		}
	}
	var err error
	if p.Amounts, err = ParseAmounts(f.amounts); err != nil {
		return Policy{}, err
	}
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	if p.Relaxed() && !dev {
		return Policy{}, errors.New("--approval-single lets one admin move money alone: only with --dev (production keeps four eyes on every money move)")
	}
	return p, nil
}

// ParseAmounts reads "EUR=100000,JPY=15000000".
func ParseAmounts(s string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		cur, v, ok := strings.Cut(kv, "=")
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		cur = strings.ToUpper(strings.TrimSpace(cur))
		if !ok || err != nil || n < 0 || !payment.KnownCurrency(cur) {
			return nil, fmt.Errorf("approval amount %q: want CUR=minor units, e.g. EUR=100000", kv)
		}
		out[cur] = n
	}
	return out, nil
}
