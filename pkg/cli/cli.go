// Package cli implements payctl, the operator and client CLI: dev tokens,
// and create/get/list/cancel over gRPC with human tables or --json.
package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	payschedv1 "github.com/paysched/paysched/gen/paysched/v1"
	"github.com/paysched/paysched/pkg/api/auth"
	"github.com/paysched/paysched/pkg/api/jsoncodec"
	"github.com/paysched/paysched/pkg/platform/config"
)

type globals struct {
	api           string
	adminAPI      string
	caFile        string
	serverName    string
	token         string
	tokenFile     string
	actor         string
	secret        string
	secretFile    string
	issuer        string
	audience      string
	adminAudience string
	json          bool
	timeout       time.Duration
	out           io.Writer
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(config.EnvName(name)); ok {
		return v
	}
	return def
}

// New returns payctl's root command.
func New() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "payctl",
		Short:         "paysched's operator and client CLI",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			g.out = cmd.OutOrStdout()
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.api, "api", env("api-grpc", "127.0.0.1:9090"), "payments-api gRPC address (env PAYSCHED_API_GRPC)")
	pf.StringVar(&g.adminAPI, "admin-api", env("admin-api-grpc", "127.0.0.1:9091"), "admin-api gRPC address, for the operators' commands (env PAYSCHED_ADMIN_API_GRPC)")
	pf.StringVar(&g.caFile, "ca-file", env("ca-file", ""), "PEM CA bundle the API's certificate must chain to: set, payctl speaks TLS (env PAYSCHED_CA_FILE); without it a token is sent only to a loopback address")
	pf.StringVar(&g.serverName, "server-name", env("server-name", ""), "name the API's certificate must carry (default: the address's host)")
	pf.StringVar(&g.tokenFile, "token-file", env("token-file", ""), "file holding the bearer token (env PAYSCHED_TOKEN_FILE): a token on the command line shows in ps")
	pf.StringVar(&g.token, "token", env("token", ""), "bearer token (env PAYSCHED_TOKEN); minted for --actor when empty")
	pf.StringVar(&g.actor, "actor", env("actor", "demo"), "actor to mint a local token for when --token is empty (env PAYSCHED_ACTOR)")
	pf.StringVar(&g.secret, "jwt-secret", env("jwt-secret", ""), "HS256 secret to mint tokens with (env PAYSCHED_JWT_SECRET; default: --jwt-secret-file, else the local stack's "+LocalSecretFile+", else the published development secret)")
	pf.StringVar(&g.secretFile, "jwt-secret-file", env("jwt-secret-file", ""), "file holding the HS256 secret (env PAYSCHED_JWT_SECRET_FILE)")
	pf.StringVar(&g.issuer, "jwt-issuer", env("jwt-issuer", auth.DefaultIssuer), "token issuer (env PAYSCHED_JWT_ISSUER)")
	pf.StringVar(&g.audience, "jwt-audience", env("jwt-audience", auth.DefaultAudience), "token audience (env PAYSCHED_JWT_AUDIENCE)")
	pf.StringVar(&g.adminAudience, "jwt-admin-audience", env("jwt-admin-audience", auth.DefaultAdminAudience), "admin tokens' audience (env PAYSCHED_JWT_ADMIN_AUDIENCE)")
	pf.BoolVar(&g.json, "json", false, "print JSON instead of tables")
	pf.DurationVar(&g.timeout, "timeout", 10*time.Second, "per-call timeout")
	root.AddCommand(tokenCmd(g), createCmd(g), getCmd(g), listCmd(g), cancelCmd(g), schedulesCmd(g), healthCmd(g), gatewayCmd(g), eventsCmd(g),
		deadLettersCmd(g), rescheduleCmd(g), reconcileCmd(g), runsCmd(g), tenantsCmd(g), webhooksCmd(g), requestsCmd(g))
	root.AddCommand(operatorMoveCmds(g)...)
	return root
}

func tokenCmd(g *globals) *cobra.Command {
	var admin bool
	var ttl time.Duration
	var tenant string
	c := &cobra.Command{
		Use:   "token",
		Short: "Mint a local dev token (HS256, the local secret)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			secret, err := g.signingSecret()
			if err != nil {
				return err
			}
			tok, err := auth.MintFor(secret, g.issuer, g.audienceFor(admin), g.actor, tenant, admin, ttl)
			if err != nil {
				return err
			}
			if g.json {
				return printJSONMap(g.out, map[string]any{"token": tok, "actor": g.actor, "admin": admin})
			}
			fmt.Fprintln(g.out, tok)
			return nil
		},
	}
	c.Flags().BoolVar(&admin, "admin", false, "include the admin claim")
	c.Flags().StringVar(&tenant, "tenant", "", "include a tenant claim: whom the actor's payments are scheduled for, as sweepers share claims (default: the actor)")
	c.Flags().DurationVar(&ttl, "ttl", 15*time.Minute, "token lifetime (the APIs refuse tokens living longer than their --jwt-max-lifetime, 1h by default)")
	return c
}

type conn struct {
	cc        *grpc.ClientConn
	ctx       context.Context
	cancel    context.CancelFunc
	payment   payschedv1.PaymentsServiceClient
	schedules payschedv1.SchedulesServiceClient
	admin     payschedv1.AdminServiceClient
}

// LocalSecretFile is where `make up` keeps the local stack's generated
// HS256 secret, relative to the checkout.
const LocalSecretFile = ".data/secrets/jwt-secret"

// signingSecret is the HS256 secret local tokens are minted with:
// --jwt-secret-file, --jwt-secret, the local stack's generated secret when
// payctl runs in the checkout, or the published development secret.
func (g *globals) signingSecret() ([]byte, error) {
	switch {
	case g.secretFile != "" && g.secret != "":
		return nil, errors.New("--jwt-secret and --jwt-secret-file are both set: give one")
	case g.secretFile != "":
		s, err := config.ReadSecret(g.secretFile)
		if err != nil {
			return nil, fmt.Errorf("--jwt-secret-file: %w", err)
		}
		return []byte(s), nil
	case g.secret != "":
		return []byte(g.secret), nil
	}
	if s, err := config.ReadSecret(LocalSecretFile); err == nil {
		return []byte(s), nil
	}
	return []byte(auth.DevSecret), nil
}

// audienceFor is the audience a minted token needs: admin tokens have
// their own.
func (g *globals) audienceFor(admin bool) string {
	if admin {
		return g.adminAudience
	}
	return g.audience
}

// dialAs connects with --token, or with a minted local token carrying the
// admin claim when admin is set.
func (g *globals) dialAs(admin bool, timeout time.Duration) (*conn, error) {
	tok := g.token
	if tok == "" && g.tokenFile != "" {
		b, err := os.ReadFile(g.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		if tok = strings.TrimSpace(string(b)); tok == "" {
			return nil, fmt.Errorf("--token-file: %s is empty", g.tokenFile)
		}
	}
	if tok == "" {
		secret, err := g.signingSecret()
		if err != nil {
			return nil, err
		}
		// Minted per command: short-lived.
		tok, err = auth.Mint(secret, g.issuer, g.audienceFor(admin), g.actor, admin, 5*time.Minute)
		if err != nil {
			return nil, err
		}
	}
	addr := g.api
	if admin {
		addr = g.adminAPI
	}
	creds, err := g.transport(addr, true)
	if err != nil {
		return nil, err
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	return &conn{cc: cc, ctx: ctx, cancel: cancel, payment: payschedv1.NewPaymentsServiceClient(cc),
		schedules: payschedv1.NewSchedulesServiceClient(cc), admin: payschedv1.NewAdminServiceClient(cc)}, nil
}

// transport is TLS with --ca-file, plaintext otherwise; a bearer token
// (withToken) is never sent in plaintext beyond this host.
func (g *globals) transport(addr string, withToken bool) (credentials.TransportCredentials, error) {
	if g.caFile != "" {
		pool, err := config.ReadCertPool(g.caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		return credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: g.serverName, MinVersion: tls.VersionTLS12}), nil
	}
	if withToken && !loopback(addr) {
		return nil, fmt.Errorf("%s is not this host, and payctl sends a bearer token only over TLS there: set --ca-file", addr)
	}
	return insecure.NewCredentials(), nil
}

// loopback reports whether addr's host is this machine.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (c *conn) close() { c.cancel(); _ = c.cc.Close() }

// call dials payments-api, or admin-api when admin is set, makes one call
// over the connection and closes it: every command reports a failed call
// alike (RPCError).
func call[R any](g *globals, admin bool, rpc func(c *conn) (R, error)) (R, error) {
	return callFor(g, admin, g.timeout, rpc)
}

// callFor is call with its own timeout, for a call that outlasts --timeout.
func callFor[R any](g *globals, admin bool, timeout time.Duration, rpc func(c *conn) (R, error)) (R, error) {
	var resp R
	err := g.with(admin, timeout, func(c *conn) error {
		r, err := rpc(c)
		if err != nil {
			return RPCError(err)
		}
		resp = r
		return nil
	})
	return resp, err
}

// with dials payments-api, or admin-api when admin is set, and runs fn
// over the connection.
func (g *globals) with(admin bool, timeout time.Duration, fn func(c *conn) error) error {
	c, err := g.dialAs(admin, timeout)
	if err != nil {
		return err
	}
	defer c.close()
	return fn(c)
}

// idCmd is a command that takes one id and makes one call with it
// (get, cancel, show and their like), to payments-api or, when admin is
// set, to admin-api; print prints the answer.
func idCmd[R any](g *globals, use, short string, admin bool, rpc func(c *conn, id string) (R, error), print func(R) error) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := call(g, admin, func(c *conn) (R, error) { return rpc(c, args[0]) })
			if err != nil {
				return err
			}
			return print(resp)
		},
	}
}

// table prints rows under a header in aligned columns.
func (g *globals) table(header string, rows func(w io.Writer)) error {
	tw := tabwriter.NewWriter(g.out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	rows(tw)
	return tw.Flush()
}

// jsonOrTable prints msg with --json, else the table of header and rows.
func (g *globals) jsonOrTable(msg proto.Message, header string, rows func(w io.Writer)) error {
	if g.json {
		return printJSON(g.out, msg)
	}
	return g.table(header, rows)
}

// parseDue accepts RFC 3339 or a duration from now ("30s", "+2m").
func parseDue(s string) (time.Time, error) {
	if d, err := time.ParseDuration(strings.TrimPrefix(s, "+")); err == nil {
		return time.Now().Add(d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want RFC 3339 (2030-01-02T15:04:05Z) or a duration from now (30s)", s)
	}
	return t, nil
}

func createCmd(g *globals) *cobra.Command {
	var payee, currency, due, desc, key string
	var amount int64
	var meta map[string]string
	c := &cobra.Command{
		Use:   "create",
		Short: "Schedule a payment",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dueAt, err := parseDue(due)
			if err != nil {
				return fmt.Errorf("--due: %w", err)
			}
			if key == "" {
				key = uuid.NewString()
			}
			resp, err := call(g, false, func(c *conn) (*payschedv1.CreateScheduledPaymentResponse, error) {
				return c.payment.CreateScheduledPayment(c.ctx, &payschedv1.CreateScheduledPaymentRequest{
					Payee: payee, Amount: amount, Currency: currency, DueAt: timestamppb.New(dueAt),
					Description: desc, Metadata: meta, RequestId: key,
				})
			})
			if err != nil {
				return err
			}
			return g.printPayments(resp, resp.GetPayment())
		},
	}
	f := c.Flags()
	f.StringVar(&payee, "payee", "", "who is paid")
	f.Int64Var(&amount, "amount", 0, "amount in minor units (cents)")
	f.StringVar(&currency, "currency", "", "ISO 4217 code (default: the server's)")
	f.StringVar(&due, "due", "1m", "due time: RFC 3339, or a duration from now")
	f.StringVar(&desc, "description", "", "free text")
	f.StringVar(&key, "idempotency-key", "", "idempotency key (default: a random UUID)")
	f.StringToStringVar(&meta, "metadata", nil, "labels, k=v,k2=v2")
	return c
}

func getCmd(g *globals) *cobra.Command {
	return idCmd(g, "get PAYMENT_ID", "Show a payment and its attempts", false,
		func(c *conn, id string) (*payschedv1.GetScheduledPaymentResponse, error) {
			return c.payment.GetScheduledPayment(c.ctx, &payschedv1.GetScheduledPaymentRequest{PaymentId: id})
		},
		func(resp *payschedv1.GetScheduledPaymentResponse) error {
			if g.json {
				return printJSON(g.out, resp)
			}
			if err := g.printPayments(nil, resp.GetPayment()); err != nil {
				return err
			}
			if len(resp.GetPayment().GetAttempts()) == 0 {
				return nil
			}
			return g.table("\nATTEMPT\tSTARTED\tFINISHED\tOUTCOME\tGATEWAY REF\tERROR", func(w io.Writer) {
				for _, a := range resp.GetPayment().GetAttempts() {
					fin := "-"
					if a.GetFinishedAt() != nil {
						fin = ts(a.GetFinishedAt())
					}
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\n", a.GetAttempt(), ts(a.GetStartedAt()), fin, a.GetOutcome(), a.GetGatewayRef(), a.GetError())
				}
			})
		})
}

func listCmd(g *globals) *cobra.Command {
	var statusName, cursor string
	var size int32
	var all bool
	c := &cobra.Command{
		Use:   "list",
		Short: "List your payments, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st := payschedv1.PaymentStatus_STATUS_UNSPECIFIED
			if statusName != "" {
				v, ok := payschedv1.PaymentStatus_value[strings.ToUpper(statusName)]
				if !ok {
					return fmt.Errorf("--status %q: want PENDING, PROCESSING, COMPLETED, FAILED, CANCELLED or DEAD_LETTERED", statusName)
				}
				st = payschedv1.PaymentStatus(v)
			}
			var ps []*payschedv1.ScheduledPayment
			last, err := call(g, false, func(c *conn) (*payschedv1.ListScheduledPaymentsResponse, error) {
				for {
					resp, err := c.payment.ListScheduledPayments(c.ctx, &payschedv1.ListScheduledPaymentsRequest{
						Status: st, Cursor: cursor, PageSize: size,
					})
					if err != nil {
						return nil, err
					}
					ps = append(ps, resp.GetPayments()...)
					if !all || resp.GetNextCursor() == "" {
						return resp, nil
					}
					cursor = resp.GetNextCursor()
				}
			})
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(g.out, &payschedv1.ListScheduledPaymentsResponse{Payments: ps, NextCursor: last.GetNextCursor()})
			}
			if err := g.printPayments(nil, ps...); err != nil {
				return err
			}
			if last.GetNextCursor() != "" {
				fmt.Fprintf(g.out, "\nmore: --cursor %s (or --all)\n", last.GetNextCursor())
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&statusName, "status", "", "only this status")
	f.StringVar(&cursor, "cursor", "", "continue from a previous page")
	f.Int32Var(&size, "page-size", 50, "page size (max 500)")
	f.BoolVar(&all, "all", false, "follow cursors to the end")
	return c
}

func cancelCmd(g *globals) *cobra.Command {
	return idCmd(g, "cancel PAYMENT_ID", "Cancel a pending payment", false,
		func(c *conn, id string) (*payschedv1.CancelScheduledPaymentResponse, error) {
			return c.payment.CancelScheduledPayment(c.ctx, &payschedv1.CancelScheduledPaymentRequest{PaymentId: id})
		},
		func(resp *payschedv1.CancelScheduledPaymentResponse) error {
			return g.printPayments(resp, resp.GetPayment())
		})
}

func healthCmd(g *globals) *cobra.Command {
	var wait time.Duration
	var httpURL string
	c := &cobra.Command{
		Use:   "health",
		Short: "Check the API's gRPC health (optionally wait for it)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			deadline := time.Now().Add(wait)
			if httpURL != "" {
				return httpHealth(g, httpURL, deadline)
			}
			creds, err := g.transport(g.api, false)
			if err != nil {
				return err
			}
			cc, err := grpc.NewClient(g.api, grpc.WithTransportCredentials(creds))
			if err != nil {
				return err
			}
			defer cc.Close()
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
				cancel()
				if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
					fmt.Fprintln(g.out, "SERVING")
					return nil
				}
				if time.Now().After(deadline) {
					if err != nil {
						return fmt.Errorf("%s not healthy: %w", g.api, err)
					}
					return fmt.Errorf("%s not healthy: %s", g.api, resp.GetStatus())
				}
				time.Sleep(200 * time.Millisecond)
			}
		},
	}
	c.Flags().DurationVar(&wait, "wait", 0, "keep trying this long")
	c.Flags().StringVar(&httpURL, "http", "", "check this HTTP health URL (e.g. http://127.0.0.1:9420/healthz) instead of gRPC health")
	return c
}

// httpHealth waits until url answers 200: for services without gRPC, in
// images without a shell or curl.
func httpHealth(g *globals, url string, deadline time.Time) error {
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				fmt.Fprintln(g.out, "SERVING")
				return nil
			}
			err = fmt.Errorf("answered %s", resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not healthy: %w", url, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (g *globals) printPayments(msg proto.Message, ps ...*payschedv1.ScheduledPayment) error {
	if g.json {
		if msg == nil && len(ps) == 1 {
			msg = ps[0]
		}
		return printJSON(g.out, msg)
	}
	return g.table("PAYMENT ID\tSTATUS\tPAYEE\tAMOUNT\tDUE AT\tATTEMPT", func(w io.Writer) {
		for _, p := range ps {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d %s\t%s\t%d\n", p.GetPaymentId(), p.GetStatus(), p.GetPayee(),
				p.GetAmount(), p.GetCurrency(), ts(p.GetDueAt()), p.GetAttempt())
		}
	})
}

func ts(t *timestamppb.Timestamp) string { return t.AsTime().UTC().Format(time.RFC3339) }

// printJSON prints m as the REST API renders it (amounts as numbers).
func printJSON(w io.Writer, m proto.Message) error {
	b, err := jsoncodec.Marshal(m)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, out.String())
	return err
}

func printJSONMap(w io.Writer, m map[string]any) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// RPCError renders a gRPC error with its status details, for a person;
// nil for none (a call that succeeded).
func RPCError(err error) error {
	if err == nil {
		// status.FromError reads nil as an OK status, which would fail a
		// command that succeeded with "OK: ".
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	msg := fmt.Sprintf("%s: %s", st.Code(), st.Message())
	for _, d := range st.Details() {
		if m, ok := d.(proto.Message); ok {
			b, _ := protojson.Marshal(m)
			msg += "\n  " + string(b)
		}
	}
	return fmt.Errorf("%s", msg)
}

// listAll reads every page of a list over one connection to payments-api,
// or admin-api when admin is set: page asks for the one after a token (a
// page token, or the last name) and answers its items and the next token,
// empty at the end.
func listAll[T any](g *globals, admin bool, page func(c *conn, token string) ([]T, string, error)) ([]T, error) {
	return call(g, admin, func(c *conn) ([]T, error) {
		var all []T
		for tok := ""; ; {
			items, next, err := page(c, tok)
			if err != nil {
				return nil, err
			}
			all = append(all, items...)
			if next == "" {
				return all, nil
			}
			tok = next
		}
	})
}
