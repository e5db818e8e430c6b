package echofence

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/errtext"
	"github.com/fencekit/fencekit/internal/redistest"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := fencing.New(r.Client, fencing.WithPrefix(r.Prefix))
	defer l.Close()
	for _, tc := range []struct {
		ttl  time.Duration
		want int
	}{
		{999 * time.Millisecond, 1},
		{1500 * time.Millisecond, 2},
		{10 * time.Second, 10},
	} {
		resource := "ra " + tc.ttl.String()
		lock, err := l.TryAcquire(t.Context(), resource, fencing.WithTTL(tc.ttl))
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.TryAcquire(t.Context(), resource)
		if !errors.Is(err, fencing.ErrNotAcquired) {
			t.Fatalf("ttl %v: got %v, want ErrNotAcquired", tc.ttl, err)
		}
		got, _ := strconv.Atoi(RetryAfter(err))
		low := tc.want
		if redistest.Real() {
			low = 1 // time passes on a real server
		}
		if got < low || got > tc.want {
			t.Errorf("ttl %v: got Retry-After %d, want %d..%d", tc.ttl, got, low, tc.want)
		}
		_ = lock.Release(context.Background())
	}
	if got := RetryAfter(errors.New("no figure")); got != "1" {
		t.Errorf("error without a TTL: got Retry-After %q, want \"1\"", got)
	}
}

func TestErrorStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want int
	}{
		{invalidf("empty resource key"), http.StatusBadRequest},
		{errtext.New(Prefix, "Locker call", errSetup, fencing.ErrInvalid), http.StatusInternalServerError},
		{fencing.ErrInvalid, http.StatusBadRequest},
		{fencing.ErrClosed, http.StatusServiceUnavailable},
		{errors.New("dial tcp: connection refused"), http.StatusServiceUnavailable},
	} {
		if got := ErrorStatus(tc.err); got != tc.want {
			t.Errorf("ErrorStatus(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestSafeMethod(t *testing.T) {
	t.Parallel()
	for m, want := range map[string]bool{
		http.MethodGet: true, http.MethodHead: true, http.MethodOptions: true, http.MethodTrace: true,
		http.MethodPut: false, http.MethodPost: false, http.MethodPatch: false, http.MethodDelete: false, "PURGE": false,
	} {
		if got := SafeMethod(m); got != want {
			t.Errorf("SafeMethod(%q) = %v, want %v", m, got, want)
		}
	}
}

func TestMust(t *testing.T) {
	t.Parallel()
	if got := Must(7, nil); got != 7 {
		t.Errorf("Must(7, nil) = %d, want 7", got)
	}
	defer func() {
		if err, _ := recover().(error); !errors.Is(err, fencing.ErrInvalid) {
			t.Errorf("got panic %v, want the error", err)
		}
	}()
	Must(0, invalidf("x"))
	t.Error("Must did not panic on an error")
}
