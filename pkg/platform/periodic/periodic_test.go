package periodic

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// Run waits a tick before its first call, RunAtOnce does not, RunWoken
// answers a wake without the tick (an hour here, so only the wake can
// explain a call), and each returns once its context ends. Nothing is
// timed: each step waits on a channel.
func TestRunCallsOnTicksWakesAndStops(t *testing.T) {
	t.Run("at once", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		called := make(chan struct{}, 1)
		done := make(chan struct{})
		go func() {
			RunAtOnce(ctx, time.Hour, func(context.Context) { called <- struct{}{} })
			close(done)
		}()
		<-called
		cancel()
		<-done
	})
	t.Run("woken", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		wake := make(chan struct{})
		called := make(chan struct{})
		done := make(chan struct{})
		go func() {
			RunWoken(ctx, time.Hour, wake, func(context.Context) { called <- struct{}{} })
			close(done)
		}()
		for range 3 {
			wake <- struct{}{}
			<-called
		}
		cancel()
		<-done
	})
	t.Run("ticks", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var n atomic.Int32
		called := make(chan struct{}, 1)
		done := make(chan struct{})
		go func() {
			Run(ctx, time.Millisecond, func(context.Context) {
				if n.Add(1) == 2 {
					called <- struct{}{}
				}
			})
			close(done)
		}()
		<-called
		cancel()
		<-done
	})
	t.Run("ended before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		RunAtOnce(ctx, time.Hour, func(context.Context) { t.Error("called after its context ended") })
	})
}
