package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/tracing"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRunSelftest runs the program as `go run ./examples/echoservice -selftest` does, on
// its embedded miniredis.
func TestRunSelftest(t *testing.T) {
	var out bytes.Buffer
	noEnv := func(string) string { return "" }
	if err := run(t.Context(), []string{"-selftest"}, noEnv, &out); err != nil {
		t.Fatalf("run -selftest: %v\n%s", err, out.String())
	}
	report := out.String()
	deposits := fmt.Sprintf("%[1]d sent: %[1]d × 200", 2*depositsPerAccount)
	for _, want := range []string{"embedded miniredis", deposits, "0 stale writes refused", "0 locks left held", "\nOK\n"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	t.Logf("\n%s", report)
}

// TestSelftest runs the self-test on the test Redis: miniredis, or the real server named by
// FENCING_REDIS_ADDR.
func TestSelftest(t *testing.T) {
	rdb, prefix := testRedis(t)
	var out bytes.Buffer
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr := &tracingSetup{
		Provider: tp,
		Lock:     fencing.WithHooks(tracing.Hooks(tracing.WithTracerProvider(tp))),
		Shutdown: tp.Shutdown,
	}
	if err := selftest(t.Context(), rdb, prefix, "test redis", tr, &out); err != nil {
		t.Fatalf("selftest: %v\n%s", err, out.String())
	}
	t.Logf("\n%s", out.String())

	// The lock's spans sit inside the request spans, with no wiring beyond the Locker.
	servers := map[trace.SpanID]bool{}
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindServer {
			servers[s.SpanContext().SpanID()] = true
		}
	}
	nested := 0
	for _, s := range rec.Ended() {
		if s.Name() == "fencing.acquire" {
			if !servers[s.Parent().SpanID()] {
				t.Fatalf("span %s has no request span as its parent", s.Name())
			}
			nested++
		}
	}
	if nested == 0 {
		t.Fatal("no fencing.acquire spans recorded")
	}
}

// TestRunServes starts the server on a free port, sends deposits and withdrawals and reads
// the balance, then stops it by cancelling the context.
func TestRunServes(t *testing.T) {
	serveOnce(t, func(string) string { return "" })
}

// serveOnce runs the service with getenv on a free port, sends it a few requests, checks the
// answers and stops it.
func serveOnce(t *testing.T, getenv func(string) string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-addr", "127.0.0.1:0"}, getenv, out) }()

	addr := regexp.MustCompile(`http://\S+`)
	var base string
	deadline := time.Now().Add(10 * time.Second)
	for base == "" {
		if time.Now().After(deadline) {
			t.Fatalf("the server did not report its address; output: %q", out.String())
		}
		base = addr.FindString(out.String())
		time.Sleep(5 * time.Millisecond) // polling interval
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	for _, tc := range []struct {
		method, path string
		status       int
		body         string
	}{
		// Bad amounts are refused before the lock is taken, so they use up no token.
		{http.MethodPost, "/accounts/a/withdraw?amount=x", http.StatusBadRequest, "positive integer"},
		{http.MethodPost, "/accounts/a/deposit?amount=0", http.StatusBadRequest, "positive integer"},
		{http.MethodPost, "/accounts/a/deposit?amount=9223372036854775808", http.StatusBadRequest, "positive integer"},
		// Ids are checked too: a name in Redis is never the client's choice.
		{http.MethodPost, "/accounts/A%20B/deposit?amount=7", http.StatusBadRequest, "Bad Request"},
		{http.MethodPost, "/accounts/a/deposit?amount=7", http.StatusOK, `"token":`},
		{http.MethodPost, "/accounts/a/withdraw?amount=9", http.StatusConflict, "insufficient funds"},
		{http.MethodPost, "/accounts/a/deposit?amount=9223372036854775807", http.StatusUnprocessableEntity, "overflow"},
		{http.MethodGet, "/accounts/a", http.StatusOK, `{"balance":7}`},
	} {
		req, _ := http.NewRequestWithContext(ctx, tc.method, base+tc.path, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.body) {
			t.Errorf("%s %s: got %d %s, want %d with %s", tc.method, tc.path, resp.StatusCode, body, tc.status, tc.body)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not stop")
	}
}

func TestRunBadFlag(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"-nope"}, func(string) string { return "" }, &out); err == nil {
		t.Error("got no error for an unknown flag")
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLeavesNothingBehind runs the self-test, then the service for one deposit, on a
// database of its own of the real Redis named by FENCING_REDIS_ADDR and checks that no key
// is left: no lock, no fence counter.
func TestLeavesNothingBehind(t *testing.T) {
	client, url := dedicated(t, 12)
	serveOnce(t, func(key string) string {
		if key == "REDIS_ADDR" {
			return url
		}
		return ""
	})
	tr, err := newTracing("", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := selftest(t.Context(), client, keyPrefix, "dedicated database", tr, &out); err != nil {
		t.Fatalf("selftest: %v\n%s", err, &out)
	}
}
