package echofencetest

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/echofence"
	"github.com/fencekit/fencekit/internal/redistest"
)

// sharedSafeMethods checks Config.Shared with SharedSafeMethods: GET and HEAD requests on one
// resource hold it together (each handler waits until another is inside), a PUT while they
// hold it is busy (423), and a GET while a PUT holds it is busy too.
func sharedSafeMethods(t *testing.T, d Driver) {
	v := newEnv(t, d)
	inside := make(chan struct{}, 2)
	leave := make(chan struct{})
	shared := func(r Request) error {
		inside <- struct{}{}
		<-leave
		return r.NoContent(http.StatusOK)
	}
	cfg := Config{SharedSafeMethods: true}
	v.e.Add(http.MethodGet, "/accounts/:id", shared, v.mw(cfg))
	v.e.Add(http.MethodHead, "/accounts/:id", shared, v.mw(cfg))
	v.e.Add(http.MethodPut, "/accounts/:id", func(r Request) error { return r.NoContent(http.StatusNoContent) }, v.mw(cfg))

	var wg sync.WaitGroup
	codes := make(chan int, 2)
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- v.serve(m, "/accounts/7").Code
		}()
	}
	for range 2 {
		select {
		case <-inside:
		case <-time.After(10 * time.Second):
			close(leave)
			wg.Wait()
			t.Fatal("the GET and the HEAD did not hold the resource together")
		}
	}
	if rec := v.serve(http.MethodPut, "/accounts/7"); rec.Code != http.StatusLocked {
		t.Errorf("PUT beside two readers: got %d, want 423", rec.Code)
	}
	close(leave)
	wg.Wait()
	for range 2 {
		if c := <-codes; c != http.StatusOK {
			t.Errorf("reader: got %d, want 200", c)
		}
	}
	if rec := v.serve(http.MethodPut, "/accounts/7"); rec.Code != http.StatusNoContent {
		t.Errorf("PUT once the readers left: got %d, want 204", rec.Code)
	}
	v.hold("/accounts/:id", "7", 10*time.Second) // a writer holds it
	if rec := v.serve(http.MethodGet, "/accounts/7"); rec.Code != http.StatusLocked {
		t.Errorf("GET while a writer holds it: got %d, want 423", rec.Code)
	}

	// QUERY (RFC 10008) reads, where the major knows it (v5): it shares the lock with a
	// reader. Elsewhere it is exclusive, and busy beside the reader.
	v.e.Add(echofence.MethodQuery, "/reports/:id", func(r Request) error { return r.NoContent(http.StatusOK) }, v.mw(cfg))
	reader, err := v.locker.TryAcquire(t.Context(), echofence.RouteName("/reports/:id", "7"), fencing.Shared())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reader.Release(context.Background()) }()
	want := http.StatusLocked
	if d.Query() {
		want = http.StatusOK
	}
	if rec := v.serve(echofence.MethodQuery, "/reports/7"); rec.Code != want {
		t.Errorf("QUERY beside a reader: got %d, want %d", rec.Code, want)
	}
}

// sharedConfig checks that Shared goes with neither a limit nor several resources.
func sharedConfig(t *testing.T, d Driver) {
	r := redistest.New(t)
	l := fencing.New(r.Client, fencing.WithPrefix(r.Prefix))
	defer l.Close()
	for name, cfg := range map[string]Config{
		"with Limit":         {Locker: l, SharedSafeMethods: true, Limit: 3},
		"with KeysExtractor": {Locker: l, SharedSafeMethods: true, KeysExtractor: func(Request) ([]string, error) { return nil, nil }},
	} {
		if _, err := d.ToMiddleware(cfg); !errors.Is(err, fencing.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
	if _, err := d.ToMiddleware(Config{Locker: l, SharedSafeMethods: true, Limit: 1}); err != nil {
		t.Errorf("with Limit 1: %v", err)
	}
}
