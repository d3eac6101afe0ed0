package demo

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/cli"
	"github.com/paysched/paysched/pkg/events/tenanthook"
)

// hooks is the demo's webhook receiver: an endpoint of the run's tenant,
// registered for the run, that verifies every delivery's signature.
type hooks struct {
	mu       sync.Mutex
	verified map[string]bool // distinct webhook-id verified
	total    int
	refused  []string
	srv      *http.Server
	err      error
}

// receiveWebhooks starts the receiver on a loopback port and registers it
// as an endpoint of the run's tenant (every event type).
func (d *demoRun) receiveWebhooks() *hooks {
	h := &hooks{verified: map[string]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.err = err
		return h
	}
	// The run's tenant registers its own endpoint on the payers' API, as a
	// tenant would (its token names it).
	resp, err := payschedv1.NewWebhooksServiceClient(d.conn).CreateEndpoint(d.ctx, &payschedv1.CreateEndpointRequest{
		Url: fmt.Sprintf("http://%s/paysched", ln.Addr()), Description: "make demo's receiver", MaxInflight: 16, MaxPerSecond: 10000})
	if err != nil {
		h.err = fmt.Errorf("create endpoint: %w", cli.RPCError(err))
	}
	secret := resp.GetSecret()
	if h.err != nil {
		ln.Close()
		return h
	}
	h.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		id := r.Header.Get(tenanthook.HeaderID)
		err := tenanthook.Verify(secret, id, r.Header.Get(tenanthook.HeaderTimestamp), r.Header.Get(tenanthook.HeaderSignature), body, time.Now())
		h.mu.Lock()
		defer h.mu.Unlock()
		h.total++
		if err != nil {
			h.refused = append(h.refused, id+": "+err.Error())
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		h.verified[id] = true
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = h.srv.Serve(ln) }()
	return h
}

func (h *hooks) stop() {
	if h.srv != nil {
		_ = h.srv.Close()
	}
}

// count is the distinct deliveries verified, all received, and the
// refusals.
func (h *hooks) count() (verified, total int, refused []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.verified), h.total, append([]string(nil), h.refused...)
}
