package errorstest

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/tracing"
)

// traced runs call on a Locker of e whose operations the tracing hooks record, in mode, and
// returns the status description of the first span that failed, as an error of that text:
// the text a trace shows.
func traced(t *testing.T, e *env, mode tracing.ResourceMode, call func(l *fencing.Locker) error) error {
	t.Helper()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	l := e.newLocker(t, fencing.WithHooks(tracing.Hooks(tracing.WithTracerProvider(tp), tracing.WithResourceAttribute(mode))))
	if err := call(l); err == nil {
		t.Fatal("the call returned no error")
	}
	for _, s := range spans.Ended() {
		if s.Status().Code == codes.Error {
			return errors.New(s.Status().Description)
		}
	}
	t.Fatal("no span has the status Error")
	return nil
}

func tracingCases() []errCase {
	tryAcquire := func(opts ...fencing.CallOption) func(l *fencing.Locker) error {
		return func(l *fencing.Locker) error {
			_, err := l.TryAcquire(context.Background(), "r", opts...)
			return err
		}
	}
	var cases []errCase
	for _, m := range []struct {
		name string
		mode tracing.ResourceMode
	}{{"", tracing.ResourceOn}, {"/hashed", tracing.ResourceHashed}, {"/off", tracing.ResourceOff}} {
		cases = append(cases,
			errCase{"tracing.Hooks/ErrInvalid" + m.name, core, nil, func(t *testing.T) error {
				return traced(t, newEnv(t), m.mode, tryAcquire(fencing.WithTTL(-time.Second)))
			}},
			errCase{"tracing.Hooks/ErrNotReplicated" + m.name, core, nil, func(t *testing.T) error {
				return traced(t, newEnv(t), m.mode, tryAcquire(fencing.WithReplicas(1, 20*time.Millisecond)))
			}},
			errCase{"tracing.Hooks/ErrNotHeld" + m.name, core, nil, func(t *testing.T) error {
				return traced(t, newEnv(t), m.mode, func(l *fencing.Locker) error {
					k, err := l.TryAcquire(t.Context(), "r")
					if err != nil {
						t.Fatal(err)
					}
					_ = k.Release(t.Context())
					return k.Release(t.Context())
				})
			}},
		)
	}
	cases = append(cases,
		errCase{"tracing.Hooks/ErrClosed", core, nil, func(t *testing.T) error {
			return traced(t, newEnv(t), tracing.ResourceOn, func(l *fencing.Locker) error {
				_ = l.Close()
				return tryAcquire()(l)
			})
		}},
		errCase{"tracing.Hooks/ErrLayout", core, nil, func(t *testing.T) error {
			e := newEnv(t)
			e.layout1(t, "r")
			return traced(t, e, tracing.ResourceOn, tryAcquire(fencing.Shared()))
		}},
		errCase{"tracing.Hooks/ErrNotHeld/renewal", core, nil, func(t *testing.T) error {
			e := newEnv(t)
			return traced(t, e, tracing.ResourceOn, func(l *fencing.Locker) error {
				return l.Do(t.Context(), "r", func(ctx context.Context) error { return e.loseByRenewal(ctx, t, "r") }, shortLease)
			})
		}},
	)
	return cases
}

func TestTracing(t *testing.T) {
	t.Parallel()
	run(t, tracingCases())
}
