package echofence

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
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
		{setupErr(fencing.ErrInvalid), http.StatusInternalServerError},
		{fencing.ErrInvalid, http.StatusBadRequest},
		{fencing.ErrClosed, http.StatusServiceUnavailable},
		{fmt.Errorf("fencing: acquire \"r\": %w", fencing.ErrNotReplicated), http.StatusServiceUnavailable},
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

// TestErrorTexts checks the rule of docs/echo.md for the texts of the adapters' errors: the
// Locker's errors as they are (one "fencing: " prefix, errSetup joined after), the adapters'
// own with one "fencemw: " prefix and no other package's text (a user's error after it, as
// it is), each one line with no segment twice, and each matching what it stands for.
func TestErrorTexts(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	closed := fencing.New(r.Client)
	_ = closed.Close()
	badOpts := fencing.New(r.Client, fencing.WithCounterExpiry(time.Second))
	defer badOpts.Close()
	good := fencing.New(r.Client, fencing.WithPrefix(r.Prefix))
	defer good.Close()
	_, refused := good.TryAcquireAll(t.Context(), nil) // a call the Locker refuses: no resources
	userErr := errors.New("no account in the path")
	_, decodeErr := decodeRecord("2:x")
	for _, tc := range []struct {
		name  string
		err   error
		start string
		match []error
	}{
		{"invalidf", invalidf("negative MaxWait %v", -time.Second), "fencemw: negative MaxWait -1s", []error{fencing.ErrInvalid}},
		{"closed Locker", probe(closed, nil), "fencemw: Locker closed", []error{fencing.ErrClosed}},
		{"Locker with bad options", probe(badOpts, nil), "fencemw: Locker built with", []error{fencing.ErrInvalid}},
		{"Locker call refused", setupErr(refused), "fencing: ", []error{fencing.ErrInvalid, errSetup}},
		{"user's error", &ownError{msg: "resource key", cause: userErr, is: []error{fencing.ErrInvalid}},
			"fencemw: resource key: no account in the path", []error{fencing.ErrInvalid, userErr}},
		{"key in use", &ownError{msg: "a later request holds the key", is: []error{fencing.ErrNotAcquired}},
			"fencemw: a later request holds the key", []error{fencing.ErrNotAcquired}},
		{"stored result", &ownError{msg: "stored result", cause: decodeErr, is: []error{errCorrupt}},
			"fencemw: stored result: malformed record: unknown version", []error{errCorrupt, errRecord}},
		{"key reused", idemErr(http.StatusUnprocessableEntity, "", ErrKeyReused), "fencemw: Idempotency-Key reused", []error{ErrKeyReused}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := tc.err.Error()
			prefixes := strings.Count(msg, "fencemw: ") + strings.Count(msg, "fencing: ") + strings.Count(msg, "store: ")
			seen := map[string]bool{}
			for _, seg := range strings.Split(msg, ": ") {
				if seen[seg] {
					t.Errorf("text %q repeats %q", msg, seg)
				}
				seen[seg] = true
			}
			if !strings.HasPrefix(msg, tc.start) || prefixes != 1 || strings.Contains(msg, "\n") {
				t.Errorf("got text %q, want one line starting %q, with one package prefix", msg, tc.start)
			}
			for _, m := range tc.match {
				if !errors.Is(tc.err, m) {
					t.Errorf("%q does not match %v", msg, m)
				}
			}
		})
	}
}
