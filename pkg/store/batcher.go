package store

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// tracer starts the span of a coalesced statement (the global provider:
// no-op unless tracing is set up).
var tracer = otel.Tracer("github.com/paysched/paysched/schedule")

// Batcher coalesces concurrent single creates into multi-row statements
// (group commit). A worker takes the first waiting create and whatever else
// is already queued, up to a limit, and writes them in one statement: under
// load Postgres pays one round trip and one commit for many payments, and
// when idle a create waits for nobody. Idempotency is unchanged: every item
// keeps its own (payer, key) record, and duplicates inside one statement
// resolve as replays.
type Batcher struct {
	store *Store
	queue chan *pendingCreate
	max   int
	stop  chan struct{}
	wg    sync.WaitGroup
}

type pendingCreate struct {
	item NewPayment
	done chan createOutcome
	// span is the caller's span: the statement's span is a child of the
	// first caller's and links the others'.
	span trace.SpanContext
}

type createOutcome struct {
	res CreateResult
	err error
}

// NewBatcher starts workers that write through store, at most max items per
// statement. Close stops them.
func NewBatcher(store *Store, workers, max int) *Batcher {
	b := &Batcher{store: store, queue: make(chan *pendingCreate, workers*max), max: max, stop: make(chan struct{})}
	for range workers {
		b.wg.Add(1)
		go b.work()
	}
	return b
}

// Create writes one payment, possibly together with others.
func (b *Batcher) Create(ctx context.Context, item NewPayment) (CreateResult, error) {
	p := &pendingCreate{item: item, done: make(chan createOutcome, 1), span: trace.SpanContextFromContext(ctx)}
	select {
	case b.queue <- p:
	case <-ctx.Done():
		return CreateResult{}, ctx.Err()
	case <-b.stop:
		return CreateResult{}, context.Canceled
	}
	select {
	case o := <-p.done:
		return o.res, o.err
	case <-ctx.Done():
		// The write may still happen; a retry with the same key replays it.
		return CreateResult{}, ctx.Err()
	}
}

// Close stops the workers after the creates already taken are written.
func (b *Batcher) Close() {
	close(b.stop)
	b.wg.Wait()
}

func (b *Batcher) work() {
	defer b.wg.Done()
	for {
		var first *pendingCreate
		select {
		case first = <-b.queue:
		case <-b.stop:
			return
		}
		batch := []*pendingCreate{first}
	drain:
		for len(batch) < b.max {
			select {
			case p := <-b.queue:
				batch = append(batch, p)
			default:
				break drain
			}
		}
		b.write(batch)
	}
}

func (b *Batcher) write(batch []*pendingCreate) {
	// The callers' contexts are not ours to honour: the statement serves many.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if batch[0].span.IsValid() {
		var span trace.Span
		ctx, span = startBatchSpan(ctx, batch)
		defer span.End()
	}
	items := make([]NewPayment, len(batch))
	for i, p := range batch {
		items[i] = p.item
	}
	res, err := b.store.Create(ctx, items)
	if err == nil {
		for i, p := range batch {
			p.done <- createOutcome{res: res[i]}
		}
		return
	}
	if len(batch) == 1 {
		batch[0].done <- createOutcome{err: err}
		return
	}
	// One bad item must not fail its neighbours: write them one by one.
	for _, p := range batch {
		r, err := b.store.Create(ctx, []NewPayment{p.item})
		o := createOutcome{err: err}
		if err == nil {
			o.res = r[0]
		}
		p.done <- o
	}
}

// startBatchSpan starts "store.create_batch", a child of the first
// caller's span (so an unbatched create traces as one tree) linked to the
// other callers' spans; the statements that write the batch are its children.
func startBatchSpan(ctx context.Context, batch []*pendingCreate) (context.Context, trace.Span) {
	var links []trace.Link
	for _, p := range batch[1:] {
		if p.span.IsValid() {
			links = append(links, trace.Link{SpanContext: p.span})
		}
	}
	return tracer.Start(trace.ContextWithSpanContext(ctx, batch[0].span), "store.create_batch",
		trace.WithLinks(links...), trace.WithAttributes(attribute.Int("paysched.batch.size", len(batch))))
}
