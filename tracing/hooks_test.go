package tracing_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/tracing"
)

// telemetry is a test's trace and metric SDK, injected through options (globals stay untouched).
type telemetry struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newTelemetry(t *testing.T) *telemetry {
	t.Helper()
	tel := &telemetry{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	tel.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	t.Cleanup(func() {
		_ = tel.tp.Shutdown(context.Background())
		_ = tel.mp.Shutdown(context.Background())
	})
	return tel
}

// hooks returns the fencing option that installs tracing hooks on tel's providers.
func (tel *telemetry) hooks(opts ...tracing.Option) fencing.Option {
	opts = append([]tracing.Option{tracing.WithTracerProvider(tel.tp), tracing.WithMeterProvider(tel.mp)}, opts...)
	return fencing.WithHooks(tracing.Hooks(opts...))
}

// parent starts a span of the test's own, as an HTTP server or job consumer would.
func (tel *telemetry) parent(ctx context.Context, name string) (context.Context, trace.Span) {
	return tel.tp.Tracer("test").Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
}

// ended returns the ended spans named name, in the order they ended.
func (tel *telemetry) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tel.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// only returns the one ended span named name.
func (tel *telemetry) only(t *testing.T, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	got := tel.ended(name)
	if len(got) != 1 {
		t.Fatalf("got %d %s spans, want 1 (all: %v)", len(got), name, spanNames(tel.spans.Ended()))
	}
	return got[0]
}

func spanNames(spans []sdktrace.ReadOnlySpan) []string {
	names := make([]string, len(spans))
	for i, s := range spans {
		names[i] = s.Name()
	}
	return names
}

func newLocker(t testing.TB, r *redistest.Redis, opts ...fencing.Option) *fencing.Locker {
	t.Helper()
	l := fencing.New(r.Client, append([]fencing.Option{fencing.WithPrefix(r.Prefix)}, opts...)...)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value)
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// want checks span attributes: a nil value means the key must be absent.
func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[attribute.Key]any) {
	t.Helper()
	got := attrs(s)
	for k, w := range want {
		v, ok := got[k]
		switch {
		case w == nil && ok:
			t.Errorf("%s: got %s=%v, want no such attribute", s.Name(), k, v.Emit())
		case w == nil:
		case !ok:
			t.Errorf("%s: no attribute %s, want %v", s.Name(), k, w)
		case v.AsInterface() != w:
			t.Errorf("%s: got %s=%v (%T), want %v (%T)", s.Name(), k, v.AsInterface(), v.AsInterface(), w, w)
		}
	}
}

func wantStatus(t *testing.T, s sdktrace.ReadOnlySpan, code codes.Code) {
	t.Helper()
	if got := s.Status().Code; got != code {
		t.Errorf("%s: got status %v (%q), want %v", s.Name(), got, s.Status().Description, code)
	}
}

func wantParent(t *testing.T, s sdktrace.ReadOnlySpan, parent trace.SpanContext) {
	t.Helper()
	if got := s.Parent(); got.TraceID() != parent.TraceID() || got.SpanID() != parent.SpanID() {
		t.Errorf("%s: got parent %v/%v, want %v/%v", s.Name(), got.TraceID(), got.SpanID(), parent.TraceID(), parent.SpanID())
	}
}

func TestAcquireReleaseExtendSpans(t *testing.T) {
	r := redistest.New(t)
	tel := newTelemetry(t)
	l := newLocker(t, r, tel.hooks())
	ctx, parent := tel.parent(t.Context(), "GET /orders/:id")

	a, err := l.TryAcquire(ctx, "order-1")
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	b, err := l.Acquire(ctx, "order-1")
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if err := b.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	parent.End()

	acq := tel.ended("fencing.acquire")
	rel := tel.ended("fencing.release")
	if len(acq) != 2 || len(rel) != 2 {
		t.Fatalf("got spans %v, want 2 acquire and 2 release", spanNames(tel.spans.Ended()))
	}
	ext := tel.only(t, "fencing.extend")
	wantAttrs(t, acq[0], map[attribute.Key]any{
		"fencing.operation": "try_acquire", "fencing.resource": "order-1", "fencing.outcome": "acquired",
		"fencing.token": a.Token(), "fencing.attempts": int64(1), "error.type": nil,
	})
	wantAttrs(t, acq[1], map[attribute.Key]any{
		"fencing.operation": "acquire", "fencing.resource": "order-1", "fencing.outcome": "acquired",
		"fencing.token": b.Token(), "fencing.attempts": int64(1),
	})
	wantAttrs(t, rel[0], map[attribute.Key]any{
		"fencing.operation": "release", "fencing.resource": "order-1", "fencing.outcome": "ok", "fencing.token": a.Token(),
	})
	wantAttrs(t, ext, map[attribute.Key]any{
		"fencing.operation": "extend", "fencing.outcome": "ok", "fencing.token": b.Token(), "fencing.attempts": nil,
	})
	for _, s := range slices.Concat(acq, rel, []sdktrace.ReadOnlySpan{ext}) {
		wantStatus(t, s, codes.Unset)
		wantParent(t, s, parent.SpanContext())
		if s.SpanKind() != trace.SpanKindInternal {
			t.Errorf("%s: got kind %v, want internal", s.Name(), s.SpanKind())
		}
		if sc := s.InstrumentationScope(); sc.Name != tracing.ScopeName || sc.Version != tracing.Version {
			t.Errorf("%s: got scope %s@%s, want %s@%s", s.Name(), sc.Name, sc.Version, tracing.ScopeName, tracing.Version)
		}
	}
	if w := attrs(acq[1])["fencing.wait.duration"]; w.Type() != attribute.FLOAT64 || w.AsFloat64() < 0 {
		t.Errorf("acquire: got fencing.wait.duration %v, want seconds >= 0", w.Emit())
	}
	if h := attrs(rel[1])["fencing.hold.duration"]; h.Type() != attribute.FLOAT64 || h.AsFloat64() <= 0 {
		t.Errorf("release: got fencing.hold.duration %v, want seconds > 0", h.Emit())
	}
}

// TestOperatorSpans: Inspect and ForceRelease make spans as every other call does, the
// force release's with the token and the label of the holder it freed (the label only where
// resource names are recorded too).
func TestOperatorSpans(t *testing.T) {
	r := redistest.New(t)
	tel := newTelemetry(t)
	l := newLocker(t, r, tel.hooks())
	ctx, parent := tel.parent(t.Context(), "POST /admin/locks/release")
	held, err := l.TryAcquire(ctx, "export-42", fencing.WithLabel("task 42"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Inspect(ctx, "export-42"); err != nil {
		t.Fatal(err)
	}
	if err := l.ForceRelease(ctx, "export-42", held.Token()); err != nil {
		t.Fatal(err)
	}
	if err := l.ForceRelease(ctx, "export-42", held.Token()); !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("a second ForceRelease: got %v, want ErrNotHeld", err)
	}
	parent.End()
	wantAttrs(t, tel.ended("fencing.acquire")[0], map[attribute.Key]any{"fencing.label": "task 42"})
	inspects := tel.ended("fencing.inspect") // one of its own, and one inside each ForceRelease
	forced := tel.ended("fencing.force_release")
	if len(inspects) != 3 || len(forced) != 2 {
		t.Fatalf("got spans %v, want 3 inspect and 2 force_release", spanNames(tel.spans.Ended()))
	}
	wantAttrs(t, inspects[0], map[attribute.Key]any{"fencing.operation": "inspect", "fencing.resource": "export-42", "fencing.outcome": "ok"})
	wantAttrs(t, forced[0], map[attribute.Key]any{
		"fencing.operation": "force_release", "fencing.resource": "export-42", "fencing.outcome": "ok",
		"fencing.token": held.Token(), "fencing.label": "task 42",
	})
	wantAttrs(t, forced[1], map[attribute.Key]any{"fencing.outcome": "not_held", "fencing.label": nil})
	for i, s := range forced {
		wantParent(t, s, parent.SpanContext())
		wantParent(t, inspects[i+1], s.SpanContext()) // a force release reads the holders first
	}
	wantParent(t, inspects[0], parent.SpanContext())
}

func TestBusyIsNotAnError(t *testing.T) {
	r := redistest.New(t)
	tel := newTelemetry(t)
	holder := newLocker(t, r)
	l := newLocker(t, r, tel.hooks())
	ctx := t.Context()
	if _, err := holder.TryAcquire(ctx, "res"); err != nil {
		t.Fatalf("holder: %v", err)
	}

	if _, err := l.TryAcquire(ctx, "res"); !errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("TryAcquire: got %v, want ErrNotAcquired", err)
	}
	if _, err := l.Acquire(ctx, "res", fencing.WithMaxWait(30*time.Millisecond)); !errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("Acquire with max wait: got %v, want ErrNotAcquired", err)
	}
	spans := tel.ended("fencing.acquire")
	if len(spans) != 2 {
		t.Fatalf("got %d acquire spans, want 2", len(spans))
	}
	for i, op := range []string{"try_acquire", "acquire"} {
		wantStatus(t, spans[i], codes.Unset)
		wantAttrs(t, spans[i], map[attribute.Key]any{
			"fencing.operation": op, "fencing.outcome": "busy", "fencing.token": nil, "error.type": nil,
		})
	}
	if n := attrs(spans[1])["fencing.attempts"].AsInt64(); n < 1 {
		t.Errorf("waiting acquire: got %d attempts, want at least 1", n)
	}
	if w := attrs(spans[1])["fencing.wait.duration"].AsFloat64(); w < 0.03 {
		t.Errorf("waiting acquire: got fencing.wait.duration %v, want at least the 30ms max wait", w)
	}
}

func TestFailedOperationSpans(t *testing.T) {
	r := redistest.New(t)
	ctx := t.Context()

	// unreachable is a Redis address nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	unreachable := ln.Addr().String()
	_ = ln.Close()

	tests := []struct {
		name    string
		run     func(t *testing.T, tel *telemetry) error
		span    string
		outcome string
		errType string
	}{
		{
			name: "deadline while waiting",
			run: func(t *testing.T, tel *telemetry) error {
				holdLock(t, r, "busy-1")
				wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
				defer cancel()
				_, err := newLocker(t, r, tel.hooks()).Acquire(wctx, "busy-1")
				return err
			},
			span: "fencing.acquire", outcome: "cancelled", errType: "timeout",
		},
		{
			name: "cancelled while waiting",
			run: func(t *testing.T, tel *telemetry) error {
				holdLock(t, r, "busy-2")
				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				stop := time.AfterFunc(30*time.Millisecond, cancel)
				defer stop.Stop()
				_, err := newLocker(t, r, tel.hooks()).Acquire(wctx, "busy-2")
				return err
			},
			span: "fencing.acquire", outcome: "cancelled", errType: "cancelled",
		},
		{
			name: "redis unreachable",
			run: func(t *testing.T, tel *telemetry) error {
				c := redis.NewClient(&redis.Options{Addr: unreachable, MaxRetries: -1, DialTimeout: time.Second})
				defer c.Close()
				l := fencing.New(c, tel.hooks())
				defer l.Close()
				_, err := l.TryAcquire(ctx, "res")
				return err
			},
			span: "fencing.acquire", outcome: "error", errType: "redis",
		},
		{
			name: "release after the lock expired",
			run: func(t *testing.T, tel *telemetry) error {
				lock, err := newLocker(t, r, tel.hooks()).TryAcquire(ctx, "short")
				if err != nil {
					t.Fatalf("TryAcquire: %v", err)
				}
				expire(t, r, "short")
				return lock.Release(ctx)
			},
			span: "fencing.release", outcome: "not_held", errType: "not_held",
		},
		{
			name: "extend after the lock was taken over",
			run: func(t *testing.T, tel *telemetry) error {
				lock, err := newLocker(t, r, tel.hooks()).TryAcquire(ctx, "taken")
				if err != nil {
					t.Fatalf("TryAcquire: %v", err)
				}
				expire(t, r, "taken")
				holdLock(t, r, "taken")
				return lock.Extend(ctx, time.Second)
			},
			span: "fencing.extend", outcome: "not_held", errType: "not_held",
		},
		{
			name: "locker closed while waiting",
			run: func(t *testing.T, tel *telemetry) error {
				holdLock(t, r, "busy-3")
				l := newLocker(t, r, tel.hooks())
				errc := make(chan error, 1)
				go func() {
					_, err := l.Acquire(ctx, "busy-3")
					errc <- err
				}()
				waitFor(t, func() bool { return sumValue(t, tel, "fencing.lock.waiters") == 1 })
				_ = l.Close()
				return <-errc
			},
			span: "fencing.acquire", outcome: "error", errType: "closed",
		},
		// Calls refused before they reach Redis get their span and metrics too.
		{
			name: "refused: closed locker",
			run: func(t *testing.T, tel *telemetry) error {
				l := newLocker(t, r, tel.hooks())
				_ = l.Close()
				_, err := l.TryAcquire(ctx, "res")
				return err
			},
			span: "fencing.acquire", outcome: "error", errType: "closed",
		},
		{
			name: "refused: empty resource",
			run: func(t *testing.T, tel *telemetry) error {
				_, err := newLocker(t, r, tel.hooks()).Acquire(ctx, "")
				return err
			},
			span: "fencing.acquire", outcome: "error", errType: "invalid",
		},
		{
			name: "refused: invalid prefix",
			run: func(t *testing.T, tel *telemetry) error {
				return newLocker(t, r, tel.hooks(), fencing.WithPrefix("{x}")).Do(ctx, "res", func(context.Context) error { return nil })
			},
			span: "fencing.acquire", outcome: "error", errType: "invalid",
		},
		{
			name: "refused: context already cancelled",
			run: func(t *testing.T, tel *telemetry) error {
				cctx, cancel := context.WithCancel(ctx)
				cancel()
				_, err := newLocker(t, r, tel.hooks()).TryAcquire(cctx, "res")
				return err
			},
			span: "fencing.acquire", outcome: "cancelled", errType: "cancelled",
		},
		{
			name: "refused: Extend(0)",
			run: func(t *testing.T, tel *telemetry) error {
				lock, err := newLocker(t, r, tel.hooks()).TryAcquire(ctx, "zero")
				if err != nil {
					t.Fatalf("TryAcquire: %v", err)
				}
				defer lock.Release(ctx)
				return lock.Extend(ctx, 0)
			},
			span: "fencing.extend", outcome: "error", errType: "invalid",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tel := newTelemetry(t)
			err := tt.run(t, tel)
			if err == nil {
				t.Fatal("got no error, want one")
			}
			s := tel.only(t, tt.span)
			wantStatus(t, s, codes.Error)
			if got := s.Status().Description; got != err.Error() {
				t.Errorf("got status description %q, want the error %q", got, err.Error())
			}
			wantAttrs(t, s, map[attribute.Key]any{"fencing.outcome": tt.outcome, "error.type": tt.errType})
			if n := len(s.Events()); n != 0 {
				t.Errorf("got %d span events, want none (errors are not recorded as events)", n)
			}
		})
	}
}

// holdLock takes resource with a Locker of its own, without hooks, and a long TTL.
func holdLock(t *testing.T, r *redistest.Redis, resource string) {
	t.Helper()
	if _, err := newLocker(t, r).TryAcquire(t.Context(), resource, fencing.WithTTL(time.Minute)); err != nil {
		t.Fatalf("holding %q: %v", resource, err)
	}
}

// expire deletes the lock key of resource, as its TTL running out would. (A short TTL would
// make the test depend on timing: on a loaded machine the acquire's reply can come back after
// such a lease could have run out, and the acquire then counts as busy.)
func expire(t *testing.T, r *redistest.Redis, resource string) {
	t.Helper()
	if err := r.Client.Del(t.Context(), r.Prefix+"{"+resource+"}:lock").Err(); err != nil {
		t.Fatalf("expiring %q: %v", resource, err)
	}
}

// waitFor polls cond until it holds, failing the test after 5 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// loseLock returns work for Do that deletes the lock on resource, as another party might,
// and waits until Do cancels it (the next renewal finds the lock gone).
func loseLock(t *testing.T, r *redistest.Redis, resource string) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := r.Client.Del(ctx, r.Prefix+"{"+resource+"}:lock").Err(); err != nil {
			t.Errorf("deleting the lock: %v", err)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(5 * time.Second):
			t.Error("the work was not cancelled within 5s of the lock's deletion")
			return nil
		}
	}
}

// redisSpans is a go-redis hook that starts a client span for every command from the
// command's context, as redisotel does.
type redisSpans struct{ tracer trace.Tracer }

func (h redisSpans) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h redisSpans) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		ctx, span := h.tracer.Start(ctx, "redis "+cmd.Name(), trace.WithSpanKind(trace.SpanKindClient))
		defer span.End()
		return next(ctx, cmd)
	}
}

func (h redisSpans) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestRedisSpansNestUnderOurs(t *testing.T) {
	r := redistest.New(t)
	tel := newTelemetry(t)
	client := r.NewClient(t)
	client.AddHook(redisSpans{tracer: tel.tp.Tracer("redis")})
	l := fencing.New(client, fencing.WithPrefix(r.Prefix), tel.hooks())
	defer l.Close()
	ctx := t.Context()

	lock, err := l.TryAcquire(ctx, "nested")
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if err := lock.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}

	ours := map[trace.SpanID]string{}
	for _, s := range tel.spans.Ended() {
		if strings.HasPrefix(s.Name(), "fencing.") {
			ours[s.SpanContext().SpanID()] = s.Name()
		}
	}
	children := map[string]int{}
	for _, s := range tel.spans.Ended() {
		// Only the scripts: go-redis sends HELLO and CLIENT from inside the first
		// command's span, when it opens the connection.
		if s.Name() != "redis evalsha" && s.Name() != "redis eval" {
			continue
		}
		parent, ok := ours[s.Parent().SpanID()]
		if !ok {
			t.Errorf("%s: parent %v is not one of our spans", s.Name(), s.Parent().SpanID())
			continue
		}
		children[parent]++
	}
	for _, name := range []string{"fencing.acquire", "fencing.extend", "fencing.release"} {
		if children[name] == 0 {
			t.Errorf("%s: no Redis command span under it (children: %v)", name, children)
		}
	}
}

func TestDoUnderRequestSpan(t *testing.T) {
	r := redistest.New(t)
	tel := newTelemetry(t)
	l := newLocker(t, r, tel.hooks(), fencing.WithTTL(3*time.Second)) // renewed a second in
	ctx, parent := tel.parent(t.Context(), "job orders:sync")

	err := l.Do(ctx, "orders", func(ctx context.Context) error {
		if got := trace.SpanContextFromContext(ctx); !got.Equal(parent.SpanContext()) {
			t.Errorf("work context: got span %v, want the caller's %v", got.SpanID(), parent.SpanContext().SpanID())
		}
		_, work := tel.tp.Tracer("app").Start(ctx, "write orders")
		defer work.End()
		// Run until Do has renewed the lease once.
		waitFor(t, func() bool { return len(tel.ended("fencing.renew")) > 0 })
		return nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	parent.End()

	for _, name := range []string{"fencing.acquire", "write orders", "fencing.release"} {
		wantParent(t, tel.only(t, name), parent.SpanContext())
	}
	renew := tel.ended("fencing.renew")[0]
	wantParent(t, renew, parent.SpanContext())
	wantStatus(t, renew, codes.Unset)
	wantAttrs(t, renew, map[attribute.Key]any{"fencing.operation": "renew", "fencing.outcome": "ok", "fencing.resource": "orders"})
	if _, ok := attrs(parent.(sdktrace.ReadOnlySpan))["fencing.lost"]; ok {
		t.Error("request span: got fencing.lost, want none when the lock was kept")
	}
}

// TestEchoRequestSpanIsParent runs Do in an Echo handler behind a middleware that starts a
// server span the way otelecho does; the lock's spans are children of the request span.
func TestEchoRequestSpanIsParent(t *testing.T) {
	r := redistest.New(t)
	tel := newTelemetry(t)
	l := newLocker(t, r, tel.hooks())

	var request trace.SpanContext
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			ctx, span := tel.parent(c.Request().Context(), c.Request().Method+" "+c.Path())
			defer span.End()
			request = span.SpanContext()
			c.SetRequest(c.Request().WithContext(ctx))
			return next(c)
		}
	})
	e.POST("/orders/:id", func(c echo.Context) error {
		return l.Do(c.Request().Context(), "order:"+c.Param("id"), func(ctx context.Context) error {
			return c.NoContent(http.StatusNoContent)
		})
	})
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/orders/7", nil))
	if rec.Code != http.StatusNoContent {
		t.Fatalf("got status %d, want 204", rec.Code)
	}
	tel.only(t, "POST /orders/:id")
	for _, name := range []string{"fencing.acquire", "fencing.release"} {
		wantParent(t, tel.only(t, name), request)
	}
}

func TestLossMarksWorkSpan(t *testing.T) {
	r := redistest.New(t)
	tel := newTelemetry(t)
	l := newLocker(t, r, tel.hooks(), fencing.WithTTL(3*time.Second)) // the loss is found a second in
	ctx, job := tel.parent(t.Context(), "job orders:sync")

	var token int64
	err := l.Do(ctx, "orders", func(ctx context.Context) error {
		token, _ = fencing.TokenFromContext(ctx)
		return loseLock(t, r, "orders")(ctx)
	})
	if !errors.Is(err, fencing.ErrNotHeld) {
		t.Fatalf("Do: got %v, want ErrNotHeld", err)
	}
	job.End()

	wantAttrs(t, job.(sdktrace.ReadOnlySpan), map[attribute.Key]any{
		"fencing.lost": true, "fencing.token": token, "fencing.resource": "orders",
	})
	renew := tel.ended("fencing.renew")
	if len(renew) == 0 {
		t.Fatal("no renew span")
	}
	last := renew[len(renew)-1]
	wantParent(t, last, job.SpanContext())
	wantStatus(t, last, codes.Error)
	wantAttrs(t, last, map[attribute.Key]any{"fencing.outcome": "not_held", "error.type": "not_held", "fencing.token": token})
	rel := tel.only(t, "fencing.release")
	wantAttrs(t, rel, map[attribute.Key]any{"fencing.outcome": "not_held", "error.type": "not_held"})

	if got := sumValue(t, tel, "fencing.lock.lost"); got != 1 {
		t.Errorf("fencing.lock.lost: got %d, want 1", got)
	}
	if got := histogramCounts(t, tel, "fencing.lock.hold.duration"); got[`fencing.lost=true`] != 1 || len(got) != 1 {
		t.Errorf("fencing.lock.hold.duration counts: got %v, want only fencing.lost=true: 1", got)
	}
}

func TestResourceAttributeModes(t *testing.T) {
	const secret = "customer-8841"
	sum := sha256.Sum256([]byte(secret))
	hash := hex.EncodeToString(sum[:8])
	tests := []struct {
		name     string
		mode     tracing.ResourceMode
		resource any // fencing.resource
		hashed   any // fencing.resource.hash
	}{
		{"on", tracing.ResourceOn, secret, nil},
		{"hashed", tracing.ResourceHashed, nil, hash},
		{"off", tracing.ResourceOff, nil, nil},
		{"unknown mode acts as off", tracing.ResourceMode(99), nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := redistest.New(t)
			tel := newTelemetry(t)
			l := newLocker(t, r, tel.hooks(tracing.WithResourceAttribute(tt.mode)), fencing.WithTTL(time.Second))
			ctx, job := tel.parent(t.Context(), "job")
			lock, err := l.TryAcquire(ctx, secret)
			if err != nil {
				t.Fatalf("TryAcquire: %v", err)
			}
			_ = lock.Release(ctx)
			if err := lock.Release(ctx); !errors.Is(err, fencing.ErrNotHeld) {
				t.Fatalf("second Release: got %v, want ErrNotHeld", err)
			}
			_ = l.Do(ctx, secret, loseLock(t, r, secret))
			job.End()

			all := tel.spans.Ended()
			if len(all) < 6 {
				t.Fatalf("got spans %v, want at least 6", spanNames(all))
			}
			for _, s := range all {
				if s.Name() == "job" {
					wantAttrs(t, s, map[attribute.Key]any{"fencing.lost": true})
				}
				wantAttrs(t, s, map[attribute.Key]any{"fencing.resource": tt.resource, "fencing.resource.hash": tt.hashed})
				if tt.mode == tracing.ResourceOn {
					continue
				}
				if d := s.Status().Description; strings.Contains(d, secret) {
					t.Errorf("%s: status description %q names the resource", s.Name(), d)
				}
				for _, kv := range s.Attributes() {
					if strings.Contains(kv.Value.Emit(), secret) {
						t.Errorf("%s: attribute %s=%q names the resource", s.Name(), kv.Key, kv.Value.Emit())
					}
				}
			}
			if tt.mode == tracing.ResourceHashed {
				rel := tel.ended("fencing.release")[1]
				if d := rel.Status().Description; !strings.Contains(d, `"`+hash+`"`) {
					t.Errorf("release: got status description %q, want the hash in place of the name", d)
				}
			}
		})
	}
}

func TestComposedHooksEndTheirOwnSpans(t *testing.T) {
	r := redistest.New(t)
	first, second := newTelemetry(t), newTelemetry(t)
	l := newLocker(t, r, first.hooks(), second.hooks())
	lock, err := l.TryAcquire(t.Context(), "res")
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	_ = lock.Release(t.Context())
	for i, tel := range []*telemetry{first, second} {
		if got := spanNames(tel.spans.Ended()); !slices.Equal(got, []string{"fencing.acquire", "fencing.release"}) {
			t.Errorf("hooks %d: got ended spans %v, want acquire and release", i, got)
		}
		if n := len(tel.spans.Started()); n != 2 {
			t.Errorf("hooks %d: got %d started spans, want 2", i, n)
		}
	}
	outer, inner := first.ended("fencing.acquire")[0], second.ended("fencing.acquire")[0]
	wantParent(t, inner, outer.SpanContext())
}

func TestNothingRecordedWithoutHooks(t *testing.T) {
	r := redistest.New(t)
	tel := newTelemetry(t)
	l := newLocker(t, r, fencing.WithHooks(observe.Hooks{}))
	ctx, parent := tel.parent(t.Context(), "request")
	if err := l.Do(ctx, "res", func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Do: %v", err)
	}
	parent.End()
	if got := spanNames(tel.spans.Ended()); !slices.Equal(got, []string{"request"}) {
		t.Errorf("got spans %v, want only the caller's", got)
	}
	if rm := collect(t, tel); len(rm.ScopeMetrics) != 0 {
		t.Errorf("got metrics %v, want none", rm.ScopeMetrics)
	}
}
