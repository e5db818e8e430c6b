package echofence

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/errtext"
	"github.com/fencekit/fencekit/internal/redistest"
	"github.com/fencekit/fencekit/store"
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
	for _, tc := range []struct {
		method      string
		query       bool // the major knows QUERY
		safe, reads bool
	}{
		{http.MethodGet, false, true, true},
		{http.MethodHead, false, true, true},
		{http.MethodOptions, false, true, true},
		{http.MethodTrace, false, true, false},
		{http.MethodGet, true, true, true},
		{http.MethodTrace, true, true, false},
		{MethodQuery, true, true, true},
		{MethodQuery, false, false, false},
		{"query", true, false, false}, // methods are case-sensitive
		{http.MethodPut, true, false, false},
		{http.MethodPost, true, false, false},
		{http.MethodPatch, true, false, false},
		{http.MethodDelete, true, false, false},
		{"PURGE", true, false, false},
	} {
		if got := SafeMethod(tc.method, tc.query); got != tc.safe {
			t.Errorf("SafeMethod(%q, %v) = %v, want %v", tc.method, tc.query, got, tc.safe)
		}
		if got := ReadMethod(tc.method, tc.query); got != tc.reads {
			t.Errorf("ReadMethod(%q, %v) = %v, want %v", tc.method, tc.query, got, tc.reads)
		}
	}
}

func TestLost(t *testing.T) {
	t.Parallel()
	stale := &store.StaleTokenError{Resource: "r", Token: 1, Mark: 2}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"store.ErrStaleToken", store.ErrStaleToken, true},
		{"*store.StaleTokenError", stale, true},
		{"wrapped with %w", fmt.Errorf("debit: %w", stale), true},
		{"joined", errors.Join(errors.New("x"), store.ErrStaleToken), true},
		{"fencing.ErrNotHeld", fencing.ErrNotHeld, true},
		{"wrapped ErrNotHeld", fmt.Errorf("save: %w", fencing.ErrNotHeld), true},
		{"wrapped with %v", fmt.Errorf("debit: %v", stale), false},
		{"busy", fencing.ErrNotAcquired, false},
		{"store.ErrNotFound", store.ErrNotFound, false},
		{"context canceled", context.Canceled, false},
	} {
		if got := Lost(tc.err); got != tc.want {
			t.Errorf("%s: Lost(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
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
