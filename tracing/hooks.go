package tracing

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fencing/observe"
)

// Hooks returns hooks that record a span and metrics for every operation of the Locker they
// are given to, with [fencing.WithHooks]:
//
//	locker := fencing.New(rdb, fencing.WithHooks(tracing.Hooks(
//		tracing.WithTracerProvider(tp), tracing.WithMeterProvider(mp))))
//
// Providers not given are the global ones, resolved when Hooks is called; the global
// providers forward to those installed later with otel.SetTracerProvider and
// otel.SetMeterProvider, so Hooks may run before the SDK is set up. Instrument-creation
// errors go to [otel.Handle]. The hooks are safe for concurrent use; create them once per
// Locker, or once for several.
func Hooks(opts ...Option) observe.Hooks {
	var c config
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	r := &recorder{
		tracer: c.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version)),
		mode:   c.mode,
		inst:   newInstruments(c.mp),
	}
	return observe.Hooks{Start: r.start, End: r.end, Lost: r.lost}
}

// recorder turns hook calls into spans and measurements. It is immutable once built.
type recorder struct {
	tracer trace.Tracer
	mode   ResourceMode
	inst   *instruments
}

// spanKey is the context key under which a recorder keeps the span its start began, so that
// its end finds that span even when other hooks have started spans after it.
type spanKey struct{ r *recorder }

// spanNames maps operations to span names; an acquire and a try-acquire share one.
var spanNames = [...]string{
	observe.OpAcquire:    "fencing.acquire",
	observe.OpTryAcquire: "fencing.acquire",
	observe.OpRelease:    "fencing.release",
	observe.OpExtend:     "fencing.extend",
	observe.OpRenew:      "fencing.renew",
	// A set of resources: one span for the whole set.
	observe.OpAcquireAll:    "fencing.acquire_all",
	observe.OpTryAcquireAll: "fencing.acquire_all",
	observe.OpReleaseAll:    "fencing.release_all",
	observe.OpExtendAll:     "fencing.extend_all",
	observe.OpCampaign:      "fencing.campaign",
	observe.OpLead:          "fencing.lead",

	observe.OpInspect:      "fencing.inspect",
	observe.OpForceRelease: "fencing.force_release",
}

// startOptions holds each known operation's span start options, built once.
var startOptions = func() [len(spanNames)][]trace.SpanStartOption {
	var opts [len(spanNames)][]trace.SpanStartOption
	for op := range opts {
		opts[op] = spanStart(observe.Op(op))
	}
	return opts
}()

func spanStart(op observe.Op) []trace.SpanStartOption {
	return []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(keyOperation.String(op.String())),
	}
}

func (r *recorder) start(ctx context.Context, op observe.Op, resource string) context.Context {
	var name string
	var opts []trace.SpanStartOption
	if int(op) < len(spanNames) && spanNames[op] != "" {
		name, opts = spanNames[op], startOptions[op]
	} else { // an operation newer than this package
		name, opts = "fencing."+op.String(), spanStart(op)
	}
	ctx, span := r.tracer.Start(ctx, name, opts...)
	if span.IsRecording() && resource != "" { // "" for a set: its End names the resources
		if kv, ok := resourceID(r.mode, resource); ok {
			span.SetAttributes(kv)
		}
	}
	switch op {
	case observe.OpAcquire, observe.OpAcquireAll:
		r.inst.waiters.Add(ctx, 1)
	case observe.OpLead:
		r.inst.leader.Add(ctx, 1, r.inst.leaderSet(r.mode, resource)...)
	}
	return context.WithValue(ctx, spanKey{r}, span)
}

func (r *recorder) end(ctx context.Context, e observe.Event) {
	span, ok := ctx.Value(spanKey{r}).(trace.Span)
	if !ok {
		return // not a context our start returned
	}
	acquisition := isAcquisition(e.Op)
	switch {
	case acquisition:
		if e.Op == observe.OpAcquire || e.Op == observe.OpAcquireAll {
			r.inst.waiters.Add(ctx, -1)
		}
		r.inst.acquisition(ctx, e)
	case (e.Op == observe.OpRelease || e.Op == observe.OpReleaseAll) && e.Outcome == observe.OutcomeOK:
		// A release that finds the lock gone does not know how long it was held.
		r.inst.hold(ctx, e.Held, false)
	case e.Op == observe.OpLead:
		r.inst.leader.Add(ctx, -1, r.inst.leaderSet(r.mode, e.Resource)...)
	}
	if !span.IsRecording() {
		span.End()
		return
	}
	attrs := make([]attribute.KeyValue, 0, 7)
	attrs = append(attrs, keyOutcome.String(string(e.Outcome)))
	if e.Resources != nil {
		attrs = append(attrs, keyResourceCount.Int(len(e.Resources)))
		if e.Resource != "" { // the resource that was busy, or not held
			if kv, ok := resourceID(r.mode, e.Resource); ok {
				attrs = append(attrs, kv)
			}
		}
	}
	if e.Token > 0 {
		attrs = append(attrs, keyToken.Int64(e.Token))
	}
	if e.Label != "" && r.mode == ResourceOn { // a label is the caller's data, as a name is
		attrs = append(attrs, keyLabel.String(e.Label))
	}
	if acquisition {
		attrs = append(attrs, keyAttempts.Int(e.Attempts), keyWait.Float64(e.Elapsed.Seconds()))
	}
	if (e.Op == observe.OpRelease || e.Op == observe.OpReleaseAll || e.Op == observe.OpLead) && e.Held > 0 {
		attrs = append(attrs, keyHold.Float64(e.Held.Seconds()))
	}
	switch {
	case e.Op == observe.OpCampaign:
		attrs = append(attrs, keyWait.Float64(e.Elapsed.Seconds()))
		if e.Outcome == observe.OutcomeAcquired {
			span.AddEvent(eventWon, trace.WithAttributes(keyToken.Int64(e.Token)))
		}
	case e.Op == observe.OpLead && e.Outcome == observe.OutcomeNotHeld:
		// Losing leadership is what a term ends with, not a failure of the span.
		attrs = append(attrs, keyLost.Bool(true))
		span.AddEvent(eventLost, trace.WithAttributes(keyToken.Int64(e.Token)))
		span.SetAttributes(attrs...)
		span.End()
		return
	case e.Op == observe.OpLead:
		span.AddEvent(eventResigned, trace.WithAttributes(keyToken.Int64(e.Token)))
	}
	if failed(e) {
		errType := errorType(e.Err)
		if e.Op == observe.OpLead && errType == errRedis {
			errType = errWork
		}
		attrs = append(attrs, keyErrorType.String(errType))
		span.SetStatus(codes.Error, description(r.mode, e.Resource, e.Err))
	}
	span.SetAttributes(attrs...)
	span.End()
}

// isAcquisition reports whether op takes locks.
func isAcquisition(op observe.Op) bool {
	switch op {
	case observe.OpAcquire, observe.OpTryAcquire, observe.OpAcquireAll, observe.OpTryAcquireAll:
		return true
	}
	return false
}

// The span events of Lead: on the campaign span when leadership is won, on the term's span
// when it ends.
const (
	eventWon      = "fencing.leader.won"
	eventLost     = "fencing.leader.lost"
	eventResigned = "fencing.leader.resigned"
)

// failed reports whether e is an error for the span status: a busy resource is not.
func failed(e observe.Event) bool {
	if e.Err == nil {
		return false
	}
	switch e.Outcome {
	case observe.OutcomeError, observe.OutcomeCancelled, observe.OutcomeNotHeld:
		return true
	}
	return false
}

// lost marks the span of the work that Do is about to cancel, and counts the loss.
func (r *recorder) lost(ctx context.Context, e observe.Event) {
	r.inst.lost.Add(ctx, 1)
	r.inst.hold(ctx, e.Held, true)
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{keyLost.Bool(true), keyToken.Int64(e.Token)}
	if kv, ok := resourceID(r.mode, e.Resource); ok {
		attrs = append(attrs, kv)
	}
	span.SetAttributes(attrs...)
}
