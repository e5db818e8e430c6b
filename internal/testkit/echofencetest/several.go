package echofencetest

import (
	"errors"
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

func severalResources(t *testing.T, m Major) {
	v := newEnv(t, m)
	var denied []string
	var tokens any // c.Get(ContextKey), seen by the handler in the test's goroutine (serve)
	v.e.Add(http.MethodPost, "/transfer/:from/:to", func(r Request) error {
		ctx := r.Request().Context()
		tokens = r.Get("tokens")
		from, fromOK := fencing.TokenFor(ctx, "account:"+r.Param("from"))
		to, toOK := fencing.TokenFor(ctx, "account:"+r.Param("to"))
		if !fromOK || !toOK || from != 1 || to != 1 {
			t.Errorf("TokenFor: got %d %v, %d %v; want 1 for both", from, fromOK, to, toOK)
		}
		if _, ok := fencing.TokenFromContext(ctx); ok && r.Param("from") != r.Param("to") {
			t.Error("TokenFromContext with two resources: got a token, want none")
		}
		return noContent(r)
	}, v.mw(Config{KeysExtractor: transferKeys, Namespace: "account", ContextKey: "tokens", TokenHeader: "Fencing-Token",
		DenyHandler: func(r Request, resource string, err error) error {
			denied = append(denied, resource)
			return m.NewHTTPError(http.StatusLocked, err)
		}}))

	rec := v.expect(http.MethodPost, "/transfer/b/a", http.StatusNoContent)
	if got, ok := tokens.(map[string]int64); !ok || len(got) != 2 || got["account:a"] != 1 || got["account:b"] != 1 {
		t.Errorf("c.Get(ContextKey): got %#v, want account:a and account:b at 1", tokens)
	}
	if h := rec.Header().Values("Fencing-Token"); !slices.Equal(h, []string{"account:b=1", "account:a=1"}) {
		t.Errorf("token header: got %q, want both name=token pairs", h)
	}
	check(t, "locks left after the request", len(v.lockKeys()), 0)

	// The same account twice locks it once.
	v.expect(http.MethodPost, "/transfer/c/c", http.StatusNoContent)
	if got, _ := tokens.(map[string]int64); len(got) != 1 || got["account:c"] != 1 {
		t.Errorf("c→c tokens: got %v, want account:c alone", got)
	}

	// A busy account: denied, naming it, nothing left held.
	v.hold("account", "b")
	if rec := v.expect(http.MethodPost, "/transfer/a/b", http.StatusLocked); rec.Header().Get("Retry-After") == "" {
		t.Errorf("busy transfer: got no Retry-After, want one")
	}
	if !slices.Equal(denied, []string{"account:b"}) {
		t.Errorf("DenyHandler resources: got %v, want [account:b]", denied)
	}
	v.wantErr(t, 0, fencing.ErrNotAcquired)
	check(t, "locks held after the busy transfer (the holder's alone)", len(v.lockKeys()), 1)

	// No key: the ErrorHandler's 400.
	v.e.Add(http.MethodPost, "/none", noContent, v.mw(Config{KeysExtractor: func(Request) ([]string, error) { return nil, nil }}))
	v.expect(http.MethodPost, "/none", http.StatusBadRequest)
}

// severalResourcesNoDeadlock sends transfers between two accounts in both directions at once:
// all go through, one at a time per account.
func severalResourcesNoDeadlock(t *testing.T, m Major) {
	v := newEnv(t, m)
	var mu sync.Mutex
	inUse := map[string]bool{}
	v.e.Add(http.MethodPost, "/transfer/:from/:to", func(r Request) error {
		from, to := r.Param("from"), r.Param("to")
		mu.Lock()
		if inUse[from] || inUse[to] {
			mu.Unlock()
			return errors.New("account held twice")
		}
		inUse[from], inUse[to] = true, true
		mu.Unlock()
		time.Sleep(time.Millisecond) // widens the window for an overlap, not a synchronisation
		mu.Lock()
		inUse[from], inUse[to] = false, false
		mu.Unlock()
		return noContent(r)
	}, v.mw(Config{KeysExtractor: transferKeys, Namespace: "account", MaxWait: 20 * time.Second}))
	var wg sync.WaitGroup
	for i := range 40 {
		target := []string{"/transfer/x/y", "/transfer/y/x"}[i%2]
		wg.Go(func() { v.expect(http.MethodPost, target, http.StatusNoContent) })
	}
	wg.Wait()
}
