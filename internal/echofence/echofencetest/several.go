package echofencetest

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
)

// transferKeys is a KeysExtractor for /transfer/:from/:to.
func transferKeys(r Request) ([]string, error) {
	return []string{r.Param("from"), r.Param("to")}, nil
}

func severalResources(t *testing.T, d Driver) {
	v := newEnv(t, d)
	type seen struct {
		get              any
		from, to         int64
		fromOK, toOK     bool
		single, singleOK bool
	}
	got := make(chan seen, 1)
	var denied []string
	var mu sync.Mutex
	mw := v.mw(Config{KeysExtractor: transferKeys, Namespace: "account", ContextKey: "tokens", TokenHeader: "Fencing-Token",
		DenyHandler: func(r Request, resource string, err error) error {
			mu.Lock()
			denied = append(denied, resource)
			mu.Unlock()
			return d.NewHTTPError(http.StatusLocked, err)
		}})
	v.e.Add(http.MethodPost, "/transfer/:from/:to", func(r Request) error {
		var s seen
		ctx := r.Request().Context()
		s.get = r.Get("tokens")
		s.from, s.fromOK = fencing.TokenFor(ctx, "account:"+r.Param("from"))
		s.to, s.toOK = fencing.TokenFor(ctx, "account:"+r.Param("to"))
		_, s.singleOK = fencing.TokenFromContext(ctx)
		got <- s
		return r.NoContent(http.StatusNoContent)
	}, mw)

	rec := v.serve(http.MethodPost, "/transfer/b/a")
	if rec.Code != http.StatusNoContent {
		t.Fatalf("transfer: got %d %q, want 204", rec.Code, rec.Body.String())
	}
	s := <-got
	want := map[string]int64{"account:a": 1, "account:b": 1}
	if m, ok := s.get.(map[string]int64); !ok || len(m) != 2 || m["account:a"] != 1 || m["account:b"] != 1 {
		t.Fatalf("c.Get(ContextKey): got %#v, want %v", s.get, want)
	}
	if !s.fromOK || !s.toOK || s.from != 1 || s.to != 1 {
		t.Fatalf("TokenFor: got %d %v, %d %v; want 1 for both", s.from, s.fromOK, s.to, s.toOK)
	}
	if s.singleOK {
		t.Fatal("TokenFromContext with two resources: got a token, want none")
	}
	if h := rec.Header().Values("Fencing-Token"); !slices.Equal(h, []string{"account:b=1", "account:a=1"}) {
		t.Fatalf("token header: got %q, want both name=token pairs", h)
	}
	if n := len(v.lockKeys()); n != 0 {
		t.Fatalf("%d locks left after the request", n)
	}

	// The same account twice locks it once.
	if rec := v.serve(http.MethodPost, "/transfer/c/c"); rec.Code != http.StatusNoContent {
		t.Fatalf("transfer c→c: got %d, want 204", rec.Code)
	}
	if m, _ := (<-got).get.(map[string]int64); len(m) != 1 || m["account:c"] != 1 {
		t.Fatalf("c→c tokens: got %v, want account:c alone", m)
	}

	// A busy account: denied, naming it, nothing left held.
	holder, err := v.locker.TryAcquire(t.Context(), "account:b", fencing.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(t.Context())
	rec = v.serve(http.MethodPost, "/transfer/a/b")
	if rec.Code != http.StatusLocked || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("busy transfer: got %d (Retry-After %q), want 423 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	if !slices.Equal(denied, []string{"account:b"}) {
		t.Fatalf("DenyHandler resources: got %v, want [account:b]", denied)
	}
	if err := v.lastErr(); !errors.Is(err, fencing.ErrNotAcquired) {
		t.Fatalf("busy transfer: got error %v, want ErrNotAcquired", err)
	}
	if n := len(v.lockKeys()); n != 1 {
		t.Fatalf("%d locks held after the busy transfer, want the holder's alone", n)
	}

	// No key: the ErrorHandler's 400.
	v.e.Add(http.MethodPost, "/none", func(r Request) error { return r.NoContent(http.StatusNoContent) },
		v.mw(Config{KeysExtractor: func(Request) ([]string, error) { return nil, nil }}))
	if rec := v.serve(http.MethodPost, "/none"); rec.Code != http.StatusBadRequest {
		t.Fatalf("no keys: got %d, want 400", rec.Code)
	}
}

// severalResourcesNoDeadlock sends transfers between two accounts in both directions at once:
// all go through, one at a time per account.
func severalResourcesNoDeadlock(t *testing.T, d Driver) {
	v := newEnv(t, d)
	var mu sync.Mutex
	inUse := map[string]bool{}
	v.e.Add(http.MethodPost, "/transfer/:from/:to", func(r Request) error {
		from, to := r.Param("from"), r.Param("to")
		mu.Lock()
		if inUse[from] || inUse[to] {
			mu.Unlock()
			return fmt.Errorf("account held twice")
		}
		inUse[from], inUse[to] = true, true
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		inUse[from], inUse[to] = false, false
		mu.Unlock()
		return r.NoContent(http.StatusNoContent)
	}, v.mw(Config{KeysExtractor: transferKeys, Namespace: "account", MaxWait: 20 * time.Second}))
	var wg sync.WaitGroup
	for i := range 40 {
		target := "/transfer/x/y"
		if i%2 == 1 {
			target = "/transfer/y/x"
		}
		wg.Go(func() {
			if rec := v.serve(http.MethodPost, target); rec.Code != http.StatusNoContent {
				t.Errorf("%s: got %d %q, want 204", target, rec.Code, rec.Body.String())
			}
		})
	}
	wg.Wait()
}
