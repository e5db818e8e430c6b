package echofencetest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/fencing/observe"
)

// idemEnv is one idempotency test's Redis, Locker and Echo, behind a real HTTP server that
// the test reaches with a net/http client.
type idemEnv struct {
	*env
	srv  *httptest.Server
	runs atomic.Int32 // the runs of pay
}

func newIdemEnv(t *testing.T, d Driver, opts ...fencing.Option) *idemEnv {
	t.Helper()
	v := &idemEnv{env: newEnv(t, d, opts...)}
	v.srv = httptest.NewServer(v.e)
	t.Cleanup(v.srv.Close)
	return v
}

// imw builds the idempotency middleware from cfg with the env's Locker, failing the test on
// error.
func (v *idemEnv) imw(cfg IdemConfig) Middleware {
	v.t.Helper()
	if cfg.Locker == nil {
		cfg.Locker = v.locker
	}
	mw, err := v.d.IdempotencyToMiddleware(cfg)
	if err != nil {
		v.t.Fatalf("IdempotencyConfig.ToMiddleware: %v", err)
	}
	return mw
}

// payment is what pay answers.
type payment struct {
	Run   int32  `json:"run"`
	Token int64  `json:"token"`
	Body  string `json:"body"`
}

// pay is the handler of most idempotency tests: it counts its runs, and answers 201 with
// the run, the token and the body, a Location (replayed) and an X-Run header (not replayed).
func (v *idemEnv) pay(r Request) error {
	n := v.runs.Add(1)
	tok, _ := r.Token()
	body, err := io.ReadAll(r.Request().Body)
	if err != nil {
		return err
	}
	r.Header().Set("Location", "/payments/"+r.Param("id"))
	r.Header().Set("X-Run", strconv.Itoa(int(n)))
	return r.JSON(http.StatusCreated, payment{Run: n, Token: tok, Body: string(body)})
}

// reply is what the client got.
type reply struct {
	status int
	header http.Header
	body   string
}

// replayed reports whether the reply is marked as replayed.
func (r reply) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

// payment decodes the body as pay's answer.
func (r reply) payment(t testing.TB) payment {
	t.Helper()
	var p payment
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("body %q (status %d): %v", r.body, r.status, err)
	}
	return p
}

// problem decodes the body as an RFC 9457 problem document and checks its status.
func (r reply) problem(t testing.TB) map[string]any {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("body %q (status %d): %v", r.body, r.status, err)
	}
	if p["status"] != float64(r.status) || p["title"] != http.StatusText(r.status) || p["type"] != "about:blank" {
		t.Errorf("problem %v for status %d: want type about:blank, its status and title", p, r.status)
	}
	return p
}

// send sends method path with body through the server, with the Idempotency-Key key
// unless it is "", and header's name, value pairs.
func (v *idemEnv) send(method, path, key, body string, header ...string) reply {
	v.t.Helper()
	return sendTo(v.t, v.srv.Client(), v.srv.URL, method, path, key, body, header...)
}

// sendTo sends a request to the server at base.
func sendTo(t testing.TB, client *http.Client, base, method, path, key, body string, header ...string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return reply{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("%s %s: reading the body: %v", method, path, err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// records returns the test's idempotency records in Redis.
func (v *idemEnv) records() []string { return v.keys("*:idem") }

// sameResponse checks that got is want replayed: the same status, body and replayed
// headers, marked Idempotent-Replayed.
func sameResponse(t testing.TB, what string, want, got reply) {
	t.Helper()
	if got.status != want.status || got.body != want.body {
		t.Errorf("%s: got %d %q, want %d %q", what, got.status, got.body, want.status, want.body)
	}
	for _, h := range []string{"Content-Type", "Location"} {
		if got.header.Get(h) != want.header.Get(h) {
			t.Errorf("%s: got %s %q, want %q", what, h, got.header.Get(h), want.header.Get(h))
		}
	}
	if !got.replayed() {
		t.Errorf("%s: not marked Idempotent-Replayed: %v", what, got.header)
	}
}

// Acquisitions counts the locks a Locker takes: give WithHooks(a.Hooks()) to fencing.New.
type Acquisitions struct{ n atomic.Int64 }

// Hooks returns the hooks that count.
func (a *Acquisitions) Hooks() observe.Hooks {
	return observe.Hooks{End: func(_ context.Context, e observe.Event) {
		if (e.Op == observe.OpAcquire || e.Op == observe.OpTryAcquire) && e.Outcome == observe.OutcomeAcquired {
			a.n.Add(1)
		}
	}}
}

// Load returns the locks taken so far.
func (a *Acquisitions) Load() int64 { return a.n.Load() }
