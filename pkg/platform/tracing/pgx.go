package tracing

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// MaxStatement bounds the SQL text recorded on a span, in bytes.
const MaxStatement = 2048

var dbSystem = attribute.String("db.system", "postgresql")

// DBTracer is a pgx tracer (pgx.QueryTracer and pgx.BatchTracer): a client
// span per statement (Query, QueryRow, Exec) and per batch, named by the
// statement's first keyword(s), with db.system, db.statement (truncated) and
// the error. It only starts a span under a recording parent span (an RPC, a
// REST request, a sweeper batch): the pollers' queries outside any request
// would otherwise make a root trace each, and with tracing off the whole
// path is a context lookup.
type DBTracer struct {
	tracer trace.Tracer
}

var (
	_ pgx.QueryTracer = (*DBTracer)(nil)
	_ pgx.BatchTracer = (*DBTracer)(nil)
)

// NewDBTracer returns a tracer using the global TracerProvider (the one
// Setup installs, even when it is installed after this call).
func NewDBTracer() *DBTracer {
	return &DBTracer{tracer: otel.Tracer(ScopeName + "/pgx")}
}

// start begins a span when ctx carries a recording one.
func (t *DBTracer) start(ctx context.Context, name string) (context.Context, trace.Span, bool) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, nil, false
	}
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient))
	if !span.IsRecording() {
		return ctx, nil, false
	}
	return ctx, span, true
}

// TraceQueryStart implements pgx.QueryTracer.
func (t *DBTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	ctx, span, ok := t.start(ctx, SpanName(data.SQL))
	if ok {
		span.SetAttributes(dbSystem, attribute.String("db.statement", Truncate(data.SQL, MaxStatement)))
	}
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (t *DBTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	span, ok := ending(ctx, data.Err)
	if !ok {
		return
	}
	if data.Err == nil {
		span.SetAttributes(attribute.Int64("db.rows_affected", data.CommandTag.RowsAffected()))
	}
	span.End()
}

// ending returns the span a Trace*Start began, if it records, with err
// (the statement's or the batch's) recorded on it.
func ending(ctx context.Context, err error) (trace.Span, bool) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return nil, false
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return span, true
}

// TraceBatchStart implements pgx.BatchTracer: one span for the batch.
func (t *DBTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	ctx, span, ok := t.start(ctx, "BATCH")
	if ok {
		n := 0
		if data.Batch != nil {
			n = data.Batch.Len()
		}
		span.SetAttributes(dbSystem, attribute.Int("db.batch.size", n))
	}
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer: an event per statement; the
// statement's text is kept for the first one and for failures only, as a
// batch usually repeats one statement.
func (t *DBTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if data.Err != nil {
		span.RecordError(data.Err, trace.WithAttributes(attribute.String("db.statement", Truncate(data.SQL, MaxStatement))))
		span.SetStatus(codes.Error, data.Err.Error())
	}
}

// TraceBatchEnd implements pgx.BatchTracer.
func (t *DBTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	if span, ok := ending(ctx, data.Err); ok {
		span.End()
	}
}

// SpanName names a statement's span by its first SQL keyword, upper case
// ("SELECT", "INSERT", "WITH"), two for DDL ("CREATE TABLE"); leading
// whitespace and comments are skipped. Anything else is "SQL".
func SpanName(sql string) string {
	s := skipSpaceAndComments(sql)
	w, rest := keyword(s)
	if w == "" {
		return "SQL"
	}
	w = strings.ToUpper(w)
	switch w {
	case "CREATE", "ALTER", "DROP":
		if w2, _ := keyword(skipSpaceAndComments(rest)); w2 != "" {
			return w + " " + strings.ToUpper(w2)
		}
	}
	return w
}

// keyword splits off the leading run of ASCII letters and underscores.
func keyword(s string) (word, rest string) {
	i := 0
	for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z' || s[i] == '_') {
		i++
	}
	return s[:i], s[i:]
}

func skipSpaceAndComments(s string) string {
	for {
		s = strings.TrimLeft(s, " \t\r\n\f(")
		switch {
		case strings.HasPrefix(s, "--"):
			i := strings.IndexByte(s, '\n')
			if i < 0 {
				return ""
			}
			s = s[i+1:]
		case strings.HasPrefix(s, "/*"):
			i := strings.Index(s[2:], "*/")
			if i < 0 {
				return ""
			}
			s = s[i+4:]
		default:
			return s
		}
	}
}

// Truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
