package cli

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A command whose call succeeded reports nothing: RPCError(nil) once read
// as an OK status and failed `payctl webhooks enable`, `disable` and
// `resend` with "OK: " after they had done their work.
func TestRPCError(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   error
		want string // "" for nil
	}{
		{"success", nil, ""},
		{"status", status.Error(codes.NotFound, "no such endpoint"), "NotFound: no such endpoint"},
		{"plain", errors.New("dial: refused"), "dial: refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := RPCError(tc.in)
			switch {
			case tc.want == "" && got != nil:
				t.Fatalf("RPCError(%v) = %q, want nil", tc.in, got)
			case tc.want != "" && (got == nil || !strings.HasPrefix(got.Error(), tc.want)):
				t.Fatalf("RPCError(%v) = %v, want %q", tc.in, got, tc.want)
			}
		})
	}
}
