package gatewaysim

import (
	"context"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/paysched/paysched/pkg/gateway"
)

// tellClock gives the gateway's clock in the answer's date header, as
// gateway.v1 asks of GetCharge: services compare it with the database's
// at start (gateway.CheckClock). Called directly (tests), there is no
// stream to set it on, and nothing to tell.
func tellClock(ctx context.Context) {
	_ = grpc.SetHeader(ctx, metadata.Pairs(gateway.DateHeader, time.Now().UTC().Format(http.TimeFormat)))
}
