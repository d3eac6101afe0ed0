package payments

import (
	"sort"

	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/payment"
)

// toPayerProto is what a payer sees of p: no internal text. The gateway's
// and the transport's error messages and operators' notes (last_error,
// each attempt's error) stay in the operators' view (ToProto) and the
// audit log; a payer reads the status, the stable failure_reason, and
// each attempt's outcome.
func toPayerProto(p *payment.Payment) *payschedv1.ScheduledPayment {
	out := ToProto(p)
	out.LastError = ""
	for _, a := range out.Attempts {
		a.Error = ""
	}
	return out
}

// ToProto is the operators' form of p (attempts included when loaded),
// internal text included: the admin API's.
func ToProto(p *payment.Payment) *payschedv1.ScheduledPayment {
	out := &payschedv1.ScheduledPayment{
		PaymentId:     p.ID.String(),
		Payer:         p.Payer,
		Payee:         p.Payee,
		Amount:        p.Amount,
		Currency:      p.Currency,
		DueAt:         timestamppb.New(p.DueAt),
		RunAt:         timestamppb.New(p.RunAt),
		Status:        StatusToProto(p.Status),
		Description:   p.Description,
		Metadata:      p.Metadata,
		Attempt:       p.Attempt,
		GatewayRef:    p.GatewayRef,
		LastError:     p.LastError,
		FailureReason: string(p.FailReason),
		CreatedAt:     timestamppb.New(p.CreatedAt),
		UpdatedAt:     timestamppb.New(p.UpdatedAt),
		ScheduleId:    p.ScheduleID,
		Occurrence:    p.Occurrence,
	}
	for _, a := range p.Attempts {
		pa := &payschedv1.PaymentAttempt{
			Attempt:    a.Attempt,
			StartedAt:  timestamppb.New(a.StartedAt),
			Outcome:    string(a.Outcome),
			GatewayRef: a.GatewayRef,
			Error:      a.Error,
		}
		if a.FinishedAt != nil {
			pa.FinishedAt = timestamppb.New(*a.FinishedAt)
		}
		out.Attempts = append(out.Attempts, pa)
	}
	return out
}

// StatusToProto is the API form of a stored status.
func StatusToProto(s payment.Status) payschedv1.PaymentStatus {
	v, ok := payschedv1.PaymentStatus_value[string(s)]
	if !ok {
		return payschedv1.PaymentStatus_STATUS_UNSPECIFIED
	}
	return payschedv1.PaymentStatus(v)
}

func statusFromProto(s payschedv1.PaymentStatus) (payment.Status, bool) {
	if s == payschedv1.PaymentStatus_STATUS_UNSPECIFIED {
		return "", true
	}
	name, ok := payschedv1.PaymentStatus_name[int32(s)]
	return payment.Status(name), ok
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
