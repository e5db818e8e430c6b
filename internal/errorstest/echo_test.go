package errorstest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/echofence"
	fencemw "github.com/fencekit/fencekit/middleware"
	"github.com/fencekit/fencekit/store"
)

const mwPrefix = "fencemw: "

// An echoMajor is one Echo major's middleware package, as the cases drive it.
type echoMajor struct {
	// pkg names the package in the cases' names: "middleware" or "middleware-v5".
	pkg string
	// fence and idem build the Fence and the Idempotent middleware with ToMiddleware.
	fence func(c fenceConfig) (any, error)
	idem  func(c idemConfig) (any, error)
	// serve returns an Echo with route (for every method) under mw, whose handler runs h with
	// the request's context; the Echo's HTTPErrorHandler records the errors that reach it.
	serve func(route string, mw any, h func(ctx context.Context) error) http.Handler
	// cause returns the cause of an error the middleware answers with (Echo v4: an
	// *echo.HTTPError's Internal; Echo v5: the cause of an error with a status), or err as
	// it is when it is none (a handler's error that reached Echo unchanged).
	cause func(err error) error
	// keyReused and bodyTooLarge are the package's ErrKeyReused and ErrBodyTooLarge.
	keyReused, bodyTooLarge error
}

// fenceConfig is what the cases set of a Config; the zero value of each field is the
// Config's.
type fenceConfig struct {
	locker    *fencing.Locker
	ttl       time.Duration
	namespace string
	keys      []string // KeysExtractor's keys
	keyErr    error    // KeyExtractor's error
	shared    bool     // Shared: every request
}

// idemConfig is what the cases set of an IdempotencyConfig.
type idemConfig struct {
	locker   *fencing.Locker
	maxBody  int64
	required bool
	scopeErr error // Scope's error
}

// errorsKey is the key of a request's recorder of the errors that reach the HTTPErrorHandler.
type errorsKey struct{}

// recorder holds the errors of one request.
type recorder struct {
	mu   sync.Mutex
	errs []error
}

// record records err with the recorder of ctx.
func record(ctx context.Context, err error) {
	if r, ok := ctx.Value(errorsKey{}).(*recorder); ok {
		r.mu.Lock()
		r.errs = append(r.errs, err)
		r.mu.Unlock()
	}
}

// send sends a request to h and returns the error that reached its HTTPErrorHandler, or
// nil. header holds the Idempotency-Key, if any.
func send(h http.Handler, method, path, key, body string) error {
	r := &recorder{}
	req := httptest.NewRequestWithContext(context.WithValue(context.Background(), errorsKey{}, r), method, path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	h.ServeHTTP(httptest.NewRecorder(), req)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) == 0 {
		return nil
	}
	return errors.Join(r.errs...)
}

// echoCases are the errors of m's middleware: what it returns from ToMiddleware, and what it
// gives Echo's HTTPErrorHandler (the cause of its HTTP error, checked as it is).
func echoCases(m echoMajor) []errCase {
	const route, path = "/orders/:id", "/orders/42"
	resource := fencemw.RouteResourceName(route, "42")
	// fenced sends a PUT through the Fence middleware of cfg (with e's Locker unless set) to
	// h and returns the cause of the error that reached Echo.
	fenced := func(t *testing.T, e *env, cfg fenceConfig, h func(ctx context.Context) error) error {
		t.Helper()
		if cfg.locker == nil {
			cfg.locker = e.locker
		}
		mw, err := m.fence(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return m.cause(send(m.serve(route, mw, h), http.MethodPut, path, "", ""))
	}
	idempotent := func(t *testing.T, cfg idemConfig, h func(ctx context.Context) error) http.Handler {
		t.Helper()
		mw, err := m.idem(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return m.serve(route, mw, h)
	}
	name := m.pkg + "."
	notAcquired := []error{fencing.ErrNotAcquired}
	invalid := []error{fencing.ErrInvalid}
	return []errCase{
		// The Fence middleware.
		{name + "Fence/ErrNotAcquired", core, notAcquired, func(t *testing.T) error {
			e := newEnv(t)
			e.hold(t, resource)
			return fenced(t, e, fenceConfig{}, noop)
		}},
		{name + "Fence/ErrNotAcquired/keys", core, notAcquired, func(t *testing.T) error {
			e := newEnv(t)
			e.hold(t, fencemw.ResourceName("acct", "b"))
			return fenced(t, e, fenceConfig{namespace: "acct", keys: []string{"a", "b"}}, noop)
		}},
		{name + "Fence/ErrNotAcquired/shared", core, notAcquired, func(t *testing.T) error {
			e := newEnv(t)
			e.hold(t, resource)
			return fenced(t, e, fenceConfig{shared: true}, noop)
		}},
		{name + "Fence/ErrInvalid/key", mwPrefix, invalid, func(t *testing.T) error {
			e := newEnv(t)
			mw, err := m.fence(fenceConfig{locker: e.locker})
			if err != nil {
				t.Fatal(err)
			}
			return m.cause(send(m.serve("/orders", mw, noop), http.MethodPut, "/orders", "", "")) // no :id
		}},
		{name + "Fence/ErrInvalid/key-extractor", mwPrefix, invalid, func(t *testing.T) error {
			return fenced(t, newEnv(t), fenceConfig{keyErr: errors.New("no account in the path")}, noop)
		}},
		{name + "Fence/ErrInvalid/keys-extractor", mwPrefix, invalid, func(t *testing.T) error {
			return fenced(t, newEnv(t), fenceConfig{keys: []string{}}, noop)
		}},
		{name + "Config.ToMiddleware/ErrInvalid", mwPrefix, invalid, func(t *testing.T) error {
			_, err := m.fence(fenceConfig{locker: newEnv(t).locker, ttl: -time.Second})
			return err
		}},
		{name + "Config.ToMiddleware/ErrInvalid/nil-locker", mwPrefix, invalid, func(t *testing.T) error {
			_, err := m.fence(fenceConfig{})
			return err
		}},
		{name + "Config.ToMiddleware/ErrInvalid/locker", mwPrefix, invalid, func(t *testing.T) error {
			_, err := m.fence(fenceConfig{locker: newEnv(t, fencing.WithLimit(0)).locker})
			return err
		}},
		{name + "Config.ToMiddleware/ErrClosed", mwPrefix, []error{fencing.ErrClosed}, func(t *testing.T) error {
			_, err := m.fence(fenceConfig{locker: newEnv(t).closed(t)})
			return err
		}},
		{name + "Fence/ErrClosed", core, []error{fencing.ErrClosed}, func(t *testing.T) error {
			e := newEnv(t)
			l := e.newLocker(t)
			mw, err := m.fence(fenceConfig{locker: l})
			if err != nil {
				t.Fatal(err)
			}
			_ = l.Close()
			return m.cause(send(m.serve(route, mw, noop), http.MethodPut, path, "", ""))
		}},
		{name + "Fence/ErrInvalid/options-refused", core, invalid, func(t *testing.T) error {
			// A TTL above the Locker's counter expiry: refused when a request calls it.
			e := newEnv(t, fencing.WithCounterExpiry(time.Minute))
			return fenced(t, e, fenceConfig{ttl: time.Hour}, noop)
		}},
		{name + "Fence/ErrInvalid/kind", core, invalid, func(t *testing.T) error {
			e := newEnv(t)
			e.hold(t, resource, fencing.WithLimit(2))
			return fenced(t, e, fenceConfig{}, noop)
		}},
		{name + "Fence/ErrNotReplicated", core, []error{fencing.ErrNotReplicated}, func(t *testing.T) error {
			e := newEnv(t, fencing.WithReplicas(1, 20*time.Millisecond))
			return fenced(t, e, fenceConfig{}, noop)
		}},
		{name + "Fence/ErrLayout", core, []error{fencing.ErrLayout}, func(t *testing.T) error {
			e := newEnv(t)
			e.layout1(t, resource)
			return fenced(t, e, fenceConfig{shared: true}, noop)
		}},
		{name + "Fence/ErrNotHeld/renewal", core, []error{fencing.ErrNotHeld}, func(t *testing.T) error {
			e := newEnv(t)
			return fenced(t, e, fenceConfig{ttl: 3 * time.Second}, func(ctx context.Context) error {
				return e.loseByRenewal(ctx, t, resource)
			})
		}},
		{name + "Fence/ErrStaleToken", storePrefix, []error{store.ErrStaleToken}, func(t *testing.T) error {
			var s store.Memory
			if err := s.Admit(resource, 1<<40); err != nil {
				t.Fatal(err)
			}
			return fenced(t, newEnv(t), fenceConfig{}, func(ctx context.Context) error {
				token, _ := fencing.TokenFromContext(ctx)
				return s.Admit(resource, token)
			})
		}},
		{name + "Fence/ErrStaleToken/lost", storePrefix, []error{store.ErrStaleToken}, func(t *testing.T) error {
			return fenced(t, newEnv(t), fenceConfig{}, func(ctx context.Context) error { return staleWrite(ctx, t, resource) })
		}},

		// The Idempotent middleware.
		{name + "Idempotent/ErrKeyReused", mwPrefix, []error{m.keyReused}, func(t *testing.T) error {
			h := idempotent(t, idemConfig{locker: newEnv(t).locker}, noop)
			if err := send(h, http.MethodPost, path, "k", "a"); err != nil {
				t.Fatal(err)
			}
			return m.cause(send(h, http.MethodPost, path, "k", "b"))
		}},
		{name + "Idempotent/ErrBodyTooLarge", mwPrefix, []error{m.bodyTooLarge}, func(t *testing.T) error {
			h := idempotent(t, idemConfig{locker: newEnv(t).locker, maxBody: 4}, noop)
			return m.cause(send(h, http.MethodPost, path, "k", "12345"))
		}},
		{name + "Idempotent/ErrNotAcquired", core, notAcquired, func(t *testing.T) error {
			// A retry while the first request with its key runs.
			running, release := make(chan struct{}), make(chan struct{})
			h := idempotent(t, idemConfig{locker: newEnv(t).locker}, func(context.Context) error {
				close(running)
				<-release
				return nil
			})
			first := make(chan error, 1)
			go func() { first <- send(h, http.MethodPost, path, "k", "a") }()
			<-running
			err := m.cause(send(h, http.MethodPost, path, "k", "a"))
			close(release)
			if e := <-first; e != nil {
				t.Errorf("the first request: %v", e)
			}
			return err
		}},
		{name + "Idempotent/ErrInvalid/key", mwPrefix, invalid, func(t *testing.T) error {
			h := idempotent(t, idemConfig{locker: newEnv(t).locker}, noop)
			return m.cause(send(h, http.MethodPost, path, `"unterminated`, "a"))
		}},
		{name + "Idempotent/ErrInvalid/required", mwPrefix, invalid, func(t *testing.T) error {
			h := idempotent(t, idemConfig{locker: newEnv(t).locker, required: true}, noop)
			return m.cause(send(h, http.MethodPost, path, "", "a"))
		}},
		{name + "Idempotent/ErrInvalid/scope", mwPrefix, invalid, func(t *testing.T) error {
			h := idempotent(t, idemConfig{locker: newEnv(t).locker, scopeErr: errors.New("no client")}, noop)
			return m.cause(send(h, http.MethodPost, path, "k", "a"))
		}},
		{name + "Idempotent/ErrNotReplicated", core, []error{fencing.ErrNotReplicated}, func(t *testing.T) error {
			l := newEnv(t, fencing.WithReplicas(1, 20*time.Millisecond)).locker
			return m.cause(send(idempotent(t, idemConfig{locker: l}, noop), http.MethodPost, path, "k", "a"))
		}},
		{name + "Idempotent/ErrClosed", core, []error{fencing.ErrClosed}, func(t *testing.T) error {
			e := newEnv(t)
			l := e.newLocker(t)
			h := idempotent(t, idemConfig{locker: l}, noop)
			_ = l.Close()
			return m.cause(send(h, http.MethodPost, path, "k", "a"))
		}},
		{name + "Idempotent/ErrNotHeld/renewal", core, []error{fencing.ErrNotHeld}, func(t *testing.T) error {
			// The handler's own error, the context's cause: Echo answers it as it is.
			e := newEnv(t, shortLease)
			h := idempotent(t, idemConfig{locker: e.locker}, func(ctx context.Context) error {
				return e.loseByRenewal(ctx, t, echofence.IdempotencyName("", route, "k"))
			})
			return m.cause(send(h, http.MethodPost, path, "k", "a"))
		}},
		{name + "IdempotencyConfig.ToMiddleware/ErrInvalid", mwPrefix, invalid, func(t *testing.T) error {
			_, err := m.idem(idemConfig{locker: newEnv(t).locker, maxBody: -1})
			return err
		}},
		{name + "IdempotencyConfig.ToMiddleware/ErrClosed", mwPrefix, []error{fencing.ErrClosed}, func(t *testing.T) error {
			_, err := m.idem(idemConfig{locker: newEnv(t).closed(t)})
			return err
		}},
	}
}

func TestEcho(t *testing.T) {
	t.Parallel()
	run(t, append(echoCases(echoV4), echoCases(echoV5)...))
}
