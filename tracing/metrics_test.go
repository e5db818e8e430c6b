package tracing_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/tracing"
)

func collect(t *testing.T, tel *telemetry) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collecting metrics: %v", err)
	}
	return rm
}

// find returns the metric named name, or nil.
func find(rm metricdata.ResourceMetrics, name string) *metricdata.Metrics {
	for _, sm := range rm.ScopeMetrics {
		for i := range sm.Metrics {
			if sm.Metrics[i].Name == name {
				return &sm.Metrics[i]
			}
		}
	}
	return nil
}

func key(s attribute.Set) string { return s.Encoded(attribute.DefaultEncoder()) }

// sums returns an int64 sum's value for each attribute set, encoded as "k=v,k=v".
func sums(t *testing.T, tel *telemetry, name string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	m := find(collect(t, tel), name)
	if m == nil {
		return out
	}
	data, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s: got %T, want an int64 sum", name, m.Data)
	}
	for _, dp := range data.DataPoints {
		out[key(dp.Attributes)] = dp.Value
	}
	return out
}

// sumValue returns an int64 sum's total over its attribute sets.
func sumValue(t *testing.T, tel *telemetry, name string) int64 {
	t.Helper()
	var total int64
	for _, v := range sums(t, tel, name) {
		total += v
	}
	return total
}

// histogramCounts returns a histogram's count for each attribute set.
func histogramCounts(t *testing.T, tel *telemetry, name string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	m := find(collect(t, tel), name)
	if m == nil {
		return out
	}
	data, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s: got %T, want a float64 histogram", name, m.Data)
	}
	for _, dp := range data.DataPoints {
		out[key(dp.Attributes)] = dp.Count
	}
	return out
}

func equalMaps[V comparable](a, b map[string]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestMetricsScenario: three acquisitions (a TryAcquire, an Acquire and Do's), one busy
// TryAcquire, two releases and one lock lost inside Do.
func TestMetricsScenario(t *testing.T) {
	r := redistest.New(t)
	tel := newTelemetry(t)
	l := newLocker(t, r, tel.hooks(), fencing.WithTTL(time.Second))
	ctx := t.Context()

	a, err := l.TryAcquire(ctx, "res-a")
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if _, err := l.TryAcquire(ctx, "res-a"); !errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("second TryAcquire: got %v, want ErrNotAcquired", err)
	}
	b, err := l.Acquire(ctx, "res-b")
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if got := sumValue(t, tel, "fencing.lock.waiters"); got != 0 {
		t.Errorf("waiters after Acquire returned: got %d, want 0", got)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release a: %v", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatalf("Release b: %v", err)
	}
	err = l.Do(ctx, "res-c", loseLock(t, r, "res-c"))
	if !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("Do: got %v, want ErrNotHeld", err)
	}

	wantCounts := map[string]int64{
		"fencing.operation=try_acquire,fencing.outcome=acquired": 1,
		"fencing.operation=try_acquire,fencing.outcome=busy":     1,
		"fencing.operation=acquire,fencing.outcome=acquired":     2,
	}
	if got := sums(t, tel, "fencing.lock.acquisitions"); !equalMaps(got, wantCounts) {
		t.Errorf("fencing.lock.acquisitions: got %v, want %v", got, wantCounts)
	}
	wantHist := map[string]uint64{}
	for k, v := range wantCounts {
		wantHist[k] = uint64(v)
	}
	if got := histogramCounts(t, tel, "fencing.lock.acquire.duration"); !equalMaps(got, wantHist) {
		t.Errorf("fencing.lock.acquire.duration counts: got %v, want %v", got, wantHist)
	}
	wantHold := map[string]uint64{"fencing.lost=false": 2, "fencing.lost=true": 1}
	if got := histogramCounts(t, tel, "fencing.lock.hold.duration"); !equalMaps(got, wantHold) {
		t.Errorf("fencing.lock.hold.duration counts: got %v, want %v", got, wantHold)
	}
	if got := sums(t, tel, "fencing.lock.lost"); !equalMaps(got, map[string]int64{"": 1}) {
		t.Errorf("fencing.lock.lost: got %v, want 1 without attributes", got)
	}
	if got := sums(t, tel, "fencing.lock.waiters"); !equalMaps(got, map[string]int64{"": 0}) {
		t.Errorf("fencing.lock.waiters: got %v, want 0 without attributes", got)
	}

	rm := collect(t, tel)
	if n := len(rm.ScopeMetrics); n != 1 {
		t.Fatalf("got %d scopes, want 1", n)
	}
	if sc := rm.ScopeMetrics[0].Scope; sc.Name != tracing.ScopeName || sc.Version != tracing.Version {
		t.Errorf("got scope %s@%s, want %s@%s", sc.Name, sc.Version, tracing.ScopeName, tracing.Version)
	}
	units := map[string]string{
		"fencing.lock.acquire.duration": "s", "fencing.lock.hold.duration": "s",
		"fencing.lock.acquisitions": "{acquisition}", "fencing.lock.lost": "{lock}", "fencing.lock.waiters": "{waiter}",
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if want, ok := units[m.Name]; !ok || m.Unit != want {
			t.Errorf("%s: got unit %q, want %q", m.Name, m.Unit, want)
		}
		for _, set := range attributeSets(m.Data) {
			for _, kv := range set.ToSlice() {
				if strings.HasPrefix(string(kv.Key), "fencing.resource") || strings.Contains(kv.Value.Emit(), "res-") {
					t.Errorf("%s: attribute %s=%s names a resource", m.Name, kv.Key, kv.Value.Emit())
				}
			}
		}
	}
	if h, ok := find(rm, "fencing.lock.acquire.duration").Data.(metricdata.Histogram[float64]); ok {
		if b := h.DataPoints[0].Bounds; len(b) == 0 || b[0] != 0.001 {
			t.Errorf("acquire duration: got bounds %v, want explicit ones from 1ms", b)
		}
	}
}

func attributeSets(data metricdata.Aggregation) []attribute.Set {
	var out []attribute.Set
	switch d := data.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	}
	return out
}

func TestFailedAcquisitionMetrics(t *testing.T) {
	r := redistest.New(t)
	tel := newTelemetry(t)
	holdLock(t, r, "busy")
	l := newLocker(t, r, tel.hooks())
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(ctx, "busy"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire: got %v, want DeadlineExceeded", err)
	}
	want := map[string]int64{"error.type=timeout,fencing.operation=acquire,fencing.outcome=cancelled": 1}
	if got := sums(t, tel, "fencing.lock.acquisitions"); !equalMaps(got, want) {
		t.Errorf("fencing.lock.acquisitions: got %v, want %v", got, want)
	}
	if got := sumValue(t, tel, "fencing.lock.waiters"); got != 0 {
		t.Errorf("waiters: got %d, want 0", got)
	}
}
