package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	gatewayv1 "github.com/paysched/paysched/gen/gateway/v1"
)

// DateHeader is the response header in which a gateway.v1 server gives its
// clock on GetCharge answers (an HTTP-date, as HTTP's Date): what services
// compare with the database's clock at start (CheckClock).
const DateHeader = "date"

// Clocked is a gateway that tells its clock: the date of an answer.
type Clocked interface {
	// Clock asks the gateway something harmless and returns the date its
	// answer carried; an error if it carried none.
	Clock(ctx context.Context) (time.Time, error)
}

// clockKey is the key Clock's GetCharge names: no payment's.
const clockKey = "paysched-clock-check"

// Clock implements Clocked for a gateway.v1 server: a GetCharge of a key
// no payment has, read for its date header (in the header, or the
// trailer of an answer without a message).
func (u unary) Clock(ctx context.Context) (time.Time, error) {
	var hdr, trl metadata.MD
	_, err := u.c.GetCharge(ctx, &gatewayv1.GetChargeRequest{IdempotencyKey: clockKey}, grpc.Header(&hdr), grpc.Trailer(&trl))
	for _, md := range []metadata.MD{hdr, trl} {
		if v := md.Get(DateHeader); len(v) > 0 {
			return ParseDate(v[0])
		}
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		// No answer (yet): asked again.
		return time.Time{}, fmt.Errorf("ask the gateway its clock: %w", err)
	}
	return time.Time{}, fmt.Errorf("%w: the gateway's answer (%v) carries no %q header (gateway.v1 requires it on GetCharge)",
		ErrNoDate, status.Code(err), DateHeader)
}

// ErrNoDate means the gateway answered without saying its clock.
var ErrNoDate = errors.New("no date")

// ParseDate reads a date header: an HTTP-date (a malformed one is
// ErrNoDate: no clock was told).
func ParseDate(v string) (time.Time, error) {
	t, err := http.ParseTime(v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: the gateway's date %q is not an HTTP-date: %v", ErrNoDate, v, err)
	}
	return t, nil
}

// CheckClock compares the gateway's clock with the database's (dbNow reads
// it) and refuses a skew beyond ClockSkew: a probe looks for a payment's
// charges from its due time, by the database's clock, less ClockSkew, so a
// gateway whose clock is further behind stamps a charge made at the due
// time before the window, and the listing would prove an absence that is
// not one. A gateway that does not tell its clock is refused too. One that
// does not answer is asked again, every second, for up to wait (it may
// start after the service). Services that ask the gateway (executor,
// reconciler, admin-api) call it at start.
func CheckClock(ctx context.Context, g Clocked, dbNow func(context.Context) (time.Time, error), wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait+10*time.Second)
	defer cancel()
	deadline := time.Now().Add(wait)
	var theirs time.Time
	for {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		var err error
		theirs, err = g.Clock(actx)
		acancel()
		if err == nil {
			break
		}
		if errors.Is(err, ErrNoDate) || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("gateway clock: cannot check it against the database's (the skew margin is %s): %w", ClockSkew, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	ours, err := dbNow(ctx)
	if err != nil {
		return fmt.Errorf("gateway clock: read the database's clock: %w", err)
	}
	// An HTTP-date has whole seconds: a second's rounding is not skew.
	if d := ours.Sub(theirs); d > ClockSkew+time.Second || d < -ClockSkew-time.Second {
		return fmt.Errorf("gateway clock: the gateway's clock (%s) and the database's (%s) differ by %s, more than the contract's margin of %s: fix the clocks (NTP) before starting",
			theirs.UTC().Format(time.RFC3339), ours.UTC().Format(time.RFC3339), d.Round(time.Second), ClockSkew)
	}
	return nil
}
