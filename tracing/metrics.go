package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/fencekit/fencekit/fencing/observe"
)

// Metric names. They are listed, with their attributes, in the package documentation.
const (
	metricAcquireDuration = "fencing.lock.acquire.duration"
	metricHoldDuration    = "fencing.lock.hold.duration"
	metricAcquisitions    = "fencing.lock.acquisitions"
	metricLost            = "fencing.lock.lost"
	metricWaiters         = "fencing.lock.waiters"
	metricLeader          = "fencing.leader"
)

// Histogram bucket boundaries, in seconds.
var (
	acquireBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	holdBuckets    = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
)

// instruments are the metric instruments of one Hooks value, with the attribute sets of the
// common measurements built once.
type instruments struct {
	acquireDuration metric.Float64Histogram
	holdDuration    metric.Float64Histogram
	acquisitions    metric.Int64Counter
	lost            metric.Int64Counter
	waiters         metric.Int64UpDownCounter
	leader          metric.Int64UpDownCounter

	acquired, busy [4]measure // acquisitions that did not fail; index: see acquisitionOps
	released, gone measure    // hold durations: fencing.lost false, true
}

// measure holds the options that give a measurement one attribute set, built once so that
// recording it does not allocate.
type measure struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

func measureOf(set attribute.Set) measure {
	o := metric.WithAttributeSet(set)
	return measure{add: []metric.AddOption{o}, record: []metric.RecordOption{o}}
}

// newInstruments creates the instruments on mp. Creation errors go to [otel.Handle]; the
// failed instrument then records nothing.
func newInstruments(mp metric.MeterProvider) *instruments {
	m := mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version))
	var in instruments
	h, err := m.Float64Histogram(metricAcquireDuration,
		metric.WithUnit("s"),
		metric.WithDescription("Time spent acquiring a lock, including the wait while it was busy."),
		metric.WithExplicitBucketBoundaries(acquireBuckets...))
	in.acquireDuration = usable(h, err, metric.Float64Histogram(noop.Float64Histogram{}))
	h, err = m.Float64Histogram(metricHoldDuration,
		metric.WithUnit("s"),
		metric.WithDescription("Time a lock was held, from the acquisition to its release or loss."),
		metric.WithExplicitBucketBoundaries(holdBuckets...))
	in.holdDuration = usable(h, err, metric.Float64Histogram(noop.Float64Histogram{}))
	c, err := m.Int64Counter(metricAcquisitions,
		metric.WithUnit("{acquisition}"),
		metric.WithDescription("Acquisition calls, by outcome."))
	in.acquisitions = usable(c, err, metric.Int64Counter(noop.Int64Counter{}))
	c, err = m.Int64Counter(metricLost,
		metric.WithUnit("{lock}"),
		metric.WithDescription("Locks that Do lost while its work was running."))
	in.lost = usable(c, err, metric.Int64Counter(noop.Int64Counter{}))
	u, err := m.Int64UpDownCounter(metricWaiters,
		metric.WithUnit("{waiter}"),
		metric.WithDescription("Acquire calls in progress (waiting, or making their first attempt)."))
	in.waiters = usable(u, err, metric.Int64UpDownCounter(noop.Int64UpDownCounter{}))
	u, err = m.Int64UpDownCounter(metricLeader,
		metric.WithUnit("{leader}"),
		metric.WithDescription("1 while this process leads the name (Locker.Lead), 0 otherwise."))
	in.leader = usable(u, err, metric.Int64UpDownCounter(noop.Int64UpDownCounter{}))

	for i, op := range acquisitionOps {
		in.acquired[i] = measureOf(acquisitionSet(op, observe.OutcomeAcquired, ""))
		in.busy[i] = measureOf(acquisitionSet(op, observe.OutcomeBusy, ""))
	}
	in.released = measureOf(attribute.NewSet(keyLost.Bool(false)))
	in.gone = measureOf(attribute.NewSet(keyLost.Bool(true)))
	return &in
}

// acquisitionOps are the acquisitions, in the order of instruments.acquired and busy.
var acquisitionOps = [4]observe.Op{observe.OpAcquire, observe.OpTryAcquire, observe.OpAcquireAll, observe.OpTryAcquireAll}

// usable passes err to [otel.Handle] and returns inst, or fallback when there is no inst. An
// SDK returns a working instrument with some errors (an invalid name, a conflicting view).
func usable[T comparable](inst T, err error, fallback T) T {
	if err != nil {
		otel.Handle(err)
	}
	var none T
	if inst == none {
		return fallback
	}
	return inst
}

// acquisitionSet returns the metric attributes of an acquisition; errType is "" unless it failed.
func acquisitionSet(op observe.Op, outcome observe.Outcome, errType string) attribute.Set {
	kvs := []attribute.KeyValue{keyOperation.String(op.String()), keyOutcome.String(string(outcome))}
	if errType != "" {
		kvs = append(kvs, keyErrorType.String(errType))
	}
	return attribute.NewSet(kvs...)
}

// acquisition records a finished acquisition.
func (in *instruments) acquisition(ctx context.Context, e observe.Event) {
	i := 0
	switch e.Op {
	case observe.OpTryAcquire:
		i = 1
	case observe.OpAcquireAll:
		i = 2
	case observe.OpTryAcquireAll:
		i = 3
	}
	var m measure
	switch e.Outcome {
	case observe.OutcomeAcquired:
		m = in.acquired[i]
	case observe.OutcomeBusy:
		m = in.busy[i]
	default:
		errType := ""
		if e.Err != nil {
			errType = errorType(e.Err)
		}
		m = measureOf(acquisitionSet(e.Op, e.Outcome, errType))
	}
	in.acquisitions.Add(ctx, 1, m.add...)
	in.acquireDuration.Record(ctx, e.Elapsed.Seconds(), m.record...)
}

// hold records how long a lock was held: until its release, or until Do lost it.
func (in *instruments) hold(ctx context.Context, held time.Duration, lost bool) {
	m := in.released
	if lost {
		m = in.gone
	}
	in.holdDuration.Record(ctx, held.Seconds(), m.record...)
}

// leaderSet returns the options of a fencing.leader measurement: the leader's name as the
// resource mode records it (the one metric that carries it: leader names are few), or none.
func (in *instruments) leaderSet(mode ResourceMode, name string) []metric.AddOption {
	kv, ok := resourceID(mode, name)
	if !ok {
		return nil
	}
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kv))}
}
