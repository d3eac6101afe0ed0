// Package periodic runs a piece of a process's work on a ticker until its
// context ends: the refreshes, sweeps, commits and reports every service
// keeps up beside its main loop.
package periodic

import (
	"context"
	"time"
)

// Run calls f at each tick of every, the first one interval after it
// starts, until ctx ends.
func Run(ctx context.Context, every time.Duration, f func(context.Context)) {
	loop(ctx, every, false, nil, f)
}

// RunAtOnce is Run with a first call of f at once, before the first tick.
func RunAtOnce(ctx context.Context, every time.Duration, f func(context.Context)) {
	loop(ctx, every, true, nil, f)
}

// RunWoken is Run that also calls f at once whenever wake receives (a
// caller's "there is work now"), without waiting for the tick.
func RunWoken(ctx context.Context, every time.Duration, wake <-chan struct{}, f func(context.Context)) {
	loop(ctx, every, false, wake, f)
}

func loop(ctx context.Context, every time.Duration, atOnce bool, wake <-chan struct{}, f func(context.Context)) {
	t := time.NewTicker(every)
	defer t.Stop()
	if atOnce && ctx.Err() == nil {
		f(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wake: // a nil wake never receives
		}
		f(ctx)
	}
}
