package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/fencekit/fencekit/fencing"
)

// runMain makes the test binary run the program itself, for TestSignal.
const runMain = "ECHOV5_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMain) == "1" {
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// service is the program running in the test, on a free port.
type service struct {
	t    *testing.T
	base string
	hc   *http.Client
	stop func() error // cancels run's context and returns run's error
}

// start runs the service with REDIS_ADDR set to redisURL ("" for its embedded miniredis).
func start(t *testing.T, redisURL string) *service {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	getenv := func(k string) string {
		if k == "REDIS_ADDR" {
			return redisURL
		}
		return ""
	}
	go func() { done <- run(ctx, []string{"-addr", "127.0.0.1:0"}, getenv, out) }()
	base := waitForAddr(t, out.String, done)
	s := &service{t: t, base: base, hc: &http.Client{Timeout: 10 * time.Second}}
	var once sync.Once
	var err error
	s.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(15 * time.Second):
				err = fmt.Errorf("run did not return after its context was cancelled")
			}
			s.hc.CloseIdleConnections()
			if !strings.Contains(out.String(), "echov5: stopped") {
				err = fmt.Errorf("no \"stopped\" line; output:\n%s", out.String())
			}
		})
		return err
	}
	t.Cleanup(func() { _ = s.stop() })
	return s
}

var servingOn = regexp.MustCompile(`serving on (http://\S+)`)

// waitForAddr waits until the output names the service's address.
func waitForAddr(t *testing.T, output func() string, done <-chan error) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := servingOn.FindStringSubmatch(output()); m != nil {
			return m[1]
		}
		select {
		case err := <-done:
			t.Fatalf("the service stopped before serving: %v\n%s", err, output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service did not report its address; output:\n%s", output())
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
}

// do sends a request and returns the status, the Fencing-Token header and the body.
func (s *service) do(method, path, body string) (int, string, string) {
	s.t.Helper()
	req, _ := http.NewRequest(method, s.base+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Fencing-Token"), string(b)
}

// TestServe runs the service on the test's Redis: ids and bodies are checked before any
// lock is taken (nothing is written for them), moves are checked against the current
// status under the order's lock, and stopping the service leaves no key.
func TestServe(t *testing.T) {
	client, mr, url := testRedis(t)
	s := start(t, url)
	for _, tc := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{http.MethodPut, "/orders/abc", `{"status":"paid"}`, http.StatusBadRequest, `{"message":"Bad Request"}`},
		{http.MethodPut, "/orders/" + strings.Repeat("9", 21), `{"status":"paid"}`, http.StatusBadRequest, "Bad Request"},
		{http.MethodPut, "/orders/42", `{"status":"lost"}`, http.StatusBadRequest, "status must be"},
		{http.MethodPut, "/orders/42", `{`, http.StatusBadRequest, ""},
		{http.MethodGet, "/orders/42", "", http.StatusNotFound, ""},
	} {
		if code, _, body := s.do(tc.method, tc.path, tc.body); code != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s %s: got %d %s, want %d with %q", tc.method, tc.path, tc.body, code, body, tc.status, tc.want)
		}
	}
	if keys := client.Keys(context.Background(), "*").Val(); len(keys) != 0 {
		t.Errorf("refused requests left keys %q", keys)
	}

	var last int64
	for _, tc := range []struct {
		status string
		code   int
	}{
		{"paid", http.StatusOK},
		{"pending", http.StatusConflict}, // paid cannot go back
		{"shipped", http.StatusOK},
	} {
		code, header, body := s.do(http.MethodPut, "/orders/42", `{"status":"`+tc.status+`"}`)
		if code != tc.code {
			t.Fatalf("PUT %s: got %d %s, want %d", tc.status, code, body, tc.code)
		}
		if code == http.StatusOK {
			token, err := strconv.ParseInt(header, 10, 64)
			if err != nil || token <= last {
				t.Errorf("PUT %s: got Fencing-Token %q, want one above %d", tc.status, header, last)
			}
			last = token
		}
	}
	code, _, body := s.do(http.MethodGet, "/orders/42", "")
	var got order
	if err := json.Unmarshal([]byte(body), &got); code != http.StatusOK || err != nil || got.Status != "shipped" || got.Token != last {
		t.Errorf("GET /orders/42: got %d %s, want shipped with token %d", code, body, last)
	}

	// The order's fence counter expires an hour after its last update.
	counter := keyPrefix + "{order:42}:fence"
	if ttl := client.TTL(context.Background(), counter).Val(); ttl <= counterExpiry-time.Minute || ttl > counterExpiry {
		t.Errorf("counter %s: TTL %v, want about %v", counter, ttl, counterExpiry)
	}
	if mr != nil {
		mr.FastForward(counterExpiry)
		if mr.Exists(counter) {
			t.Errorf("counter %s still there after %v", counter, counterExpiry)
		}
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	// testRedis fails the test if the service left a key.
}

// TestConcurrentUpdates sends many updates of one order at once, half "pending" and half
// "paid": each waits its turn (no 423), each checks its move against the status the one
// before it wrote, so the successful writes, in token order, form a valid history from
// "new", and the order ends as the last of them wrote it.
func TestConcurrentUpdates(t *testing.T) {
	_, _, url := testRedis(t)
	s := start(t, url)
	const n = 20
	type result struct {
		code   int
		status string
		token  int64
	}
	results := make(chan result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			status := []string{"pending", "paid"}[i%2]
			code, header, _ := s.do(http.MethodPut, "/orders/7", `{"status":"`+status+`"}`)
			token, _ := strconv.ParseInt(header, 10, 64)
			results <- result{code, status, token}
		})
	}
	wg.Wait()
	close(results)
	counts := map[int]int{}
	var writes []result
	for r := range results {
		counts[r.code]++
		if r.code == http.StatusOK {
			writes = append(writes, r)
		}
	}
	if len(writes) < 1 || counts[http.StatusOK]+counts[http.StatusConflict] != n {
		t.Fatalf("got statuses %v, want only 200 and 409 (no 423: every request waits its turn)", counts)
	}
	slices.SortFunc(writes, func(a, b result) int { return cmp.Compare(a.token, b.token) })
	from := "new"
	for _, w := range writes {
		if !allowed(from, w.status) {
			t.Errorf("writes in token order %v: %s after %s is not a valid move", writes, w.status, from)
		}
		from = w.status
	}
	last := writes[len(writes)-1]
	code, _, body := s.do(http.MethodGet, "/orders/7", "")
	var got order
	if err := json.Unmarshal([]byte(body), &got); code != http.StatusOK || err != nil || got.Status != last.status || got.Token != last.token {
		t.Errorf("GET /orders/7: got %d %s, want the last write, %s with token %d", code, body, last.status, last.token)
	}
	t.Logf("statuses %v; writes %v", counts, writes)
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestSignal runs the program as a process of its own and stops it with SIGINT while a
// request waits for an order's lock held by another process: the request still completes
// (the shutdown is graceful), the program exits 0 and, on a real Redis, leaves no key.
func TestSignal(t *testing.T) {
	client, _, url := testRedis(t)
	if os.Getenv(envAddr) == "" {
		url = "" // the program's own embedded miniredis; nothing to hold a lock on from here
	}
	cmd := exec.Command(os.Args[0], "-addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), runMain+"=1", "REDIS_ADDR="+url)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	var base string
	for base == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the program ended before serving: %s", stderr.String())
			}
			if m := servingOn.FindStringSubmatch(line); m != nil {
				base = m[1]
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatal("the program did not report its address")
		}
	}
	s := &service{t: t, base: base, hc: &http.Client{Timeout: 10 * time.Second}}
	defer s.hc.CloseIdleConnections()
	if code, _, body := s.do(http.MethodPut, "/orders/1", `{"status":"pending"}`); code != http.StatusOK {
		t.Fatalf("PUT /orders/1: got %d %s", code, body)
	}

	inFlight := make(chan int, 1)
	if os.Getenv(envAddr) != "" {
		// Another process holds order 2's lock: the request waits for it.
		other := fencing.New(client, fencing.WithPrefix(keyPrefix), fencing.WithCounterExpiry(counterExpiry))
		defer other.Close()
		lock, err := other.TryAcquire(context.Background(), "order:2", fencing.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			code, _, _ := s.do(http.MethodPut, "/orders/2", `{"status":"paid"}`)
			inFlight <- code
		}()
		waitForWaiter(t, client, keyPrefix+"{order:2}:grant*")
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		waitForShutdown(t, base) // the server has closed its listener; the request still waits
		if err := lock.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		if code := <-inFlight; code != http.StatusOK {
			t.Errorf("the request in flight at SIGINT: got %d, want 200", code)
		}
	} else if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}

	var rest []string
	for line := range lines {
		rest = append(rest, line)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the program exited with %v; stderr: %s", err, stderr.String())
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the program did not exit after SIGINT")
	}
	if !strings.Contains(strings.Join(rest, "\n"), "echov5: stopped") {
		t.Errorf("no \"stopped\" line after SIGINT: %q", rest)
	}
	// testRedis fails the test if the program left a key on the real Redis.
}

// waitForShutdown polls until the server at base refuses new connections.
func waitForShutdown(t *testing.T, base string) {
	t.Helper()
	addr := strings.TrimPrefix(base, "http://")
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return
		}
		_ = conn.Close()
		if time.Now().After(deadline) {
			t.Fatal("the server still accepts connections after SIGINT")
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
}

// waitForWaiter polls until a waiter listens on a channel that matches pattern: a lock's grant
// channels (one per waiting Locker, or one for all of them).
func waitForWaiter(t *testing.T, client *redis.Client, pattern string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		chans, err := client.PubSubChannels(context.Background(), pattern).Result()
		if err == nil && len(chans) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no waiter on %s", pattern)
		}
		time.Sleep(5 * time.Millisecond) // polling interval
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

// TestCheckServerRefusesLockerErr checks that the service refuses, at start, a Locker whose
// options can never work (a counter expiry below the default 30s TTL), before any request.
func TestCheckServerRefusesLockerErr(t *testing.T) {
	client, _, _ := testRedis(t)
	locker := fencing.New(client, fencing.WithCounterExpiry(time.Second))
	defer locker.Close()
	var out bytes.Buffer
	if err := checkServer(t.Context(), locker, &out); !errors.Is(err, fencing.ErrInvalid) {
		t.Errorf("got %v, want an error matching fencing.ErrInvalid", err)
	}
}

// doKey sends a request with an Idempotency-Key (none when key is "") and returns the
// status, the response's header and the body.
func (s *service) doKey(method, path, key, body string) (int, http.Header, string) {
	s.t.Helper()
	req, _ := http.NewRequest(method, s.base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestPayments pays an order through the idempotency middleware and the order's lock: a key
// is required, a retry gets the same payment back (marked replayed) without paying twice,
// the key with another amount is refused, and concurrent retries of one key pay once.
func TestPayments(t *testing.T) {
	_, _, url := testRedis(t)
	s := start(t, url)
	if code, _, body := s.do(http.MethodPut, "/orders/42", `{"status":"pending"}`); code != http.StatusOK {
		t.Fatalf("PUT /orders/42: got %d %s", code, body)
	}
	if code, _, body := s.doKey(http.MethodPost, "/orders/42/payments", "", `{"amount":100}`); code != http.StatusBadRequest {
		t.Errorf("payment without a key: got %d %s, want 400", code, body)
	}
	code, header, first := s.doKey(http.MethodPost, "/orders/42/payments", "k1", `{"amount":100}`)
	if code != http.StatusCreated || header.Get("Location") != "/orders/42/payments/1" {
		t.Fatalf("first payment: got %d %s (Location %q), want 201 at /orders/42/payments/1", code, first, header.Get("Location"))
	}
	code, header, again := s.doKey(http.MethodPost, "/orders/42/payments", "k1", `{"amount":100}`)
	if code != http.StatusCreated || again != first || header.Get("Idempotent-Replayed") != "true" || header.Get("Location") != "/orders/42/payments/1" {
		t.Errorf("retry: got %d %s (%v), want the first payment replayed", code, again, header)
	}
	if code, _, body := s.doKey(http.MethodPost, "/orders/42/payments", "k1", `{"amount":500}`); code != http.StatusUnprocessableEntity {
		t.Errorf("the key with another amount: got %d %s, want 422", code, body)
	}

	const n = 10
	bodies := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, _, bodies[i] = s.doKey(http.MethodPost, "/orders/42/payments", "k2", `{"amount":50}`) })
	}
	wg.Wait()
	var p payment
	if err := json.Unmarshal([]byte(bodies[0]), &p); err != nil || p.Number != 2 || p.Amount != 50 {
		t.Fatalf("concurrent retries: got %s, want payment 2 of 50", bodies[0])
	}
	for _, b := range bodies {
		if b != bodies[0] {
			t.Fatalf("concurrent retries of one key: got %s and %s, want one payment", bodies[0], b)
		}
	}
	code, _, body := s.do(http.MethodGet, "/orders/42", "")
	var o order
	if err := json.Unmarshal([]byte(body), &o); code != http.StatusOK || err != nil || o.Paid != 150 {
		t.Errorf("GET /orders/42: got %d %s, want 150 paid", code, body)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	// testRedis fails the test if the service left a key.
}
