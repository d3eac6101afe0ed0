package freeport_test

import (
	"net"
	"sync"
	"testing"

	"github.com/paysched/paysched/test/freeport"
)

// TestPortsAreDistinctAndBindable asks for many ports from many goroutines:
// none is given twice and each can be bound.
func TestPortsAreDistinctAndBindable(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				a, err := freeport.Addr()
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[a] {
					t.Errorf("%s given twice", a)
				}
				seen[a] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for a := range seen {
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		l.Close()
	}
}
