package echofencetest

import (
	"net/http"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/echofence"
)

func skipSafeMethods(t *testing.T, m Major) {
	v := newEnv(t, m)
	h := func(r Request) error {
		if _, ok := r.Token(); ok {
			return noContent(r)
		}
		return r.NoContent(http.StatusOK)
	}
	query := http.StatusNoContent // locked where the major does not know QUERY (v4)
	if m.Query() {
		query = http.StatusOK
	}
	for method, want := range map[string]int{
		http.MethodGet:        http.StatusOK,
		http.MethodHead:       http.StatusOK,
		http.MethodOptions:    http.StatusOK,
		http.MethodPut:        http.StatusNoContent,
		http.MethodPost:       http.StatusNoContent,
		echofence.MethodQuery: query,
	} {
		v.e.Add(method, "/items/:id", h, v.mw(Config{SkipSafeMethods: true}))
		v.expect(method, "/items/1", want)
	}
	v.hold("/items/:id", "1")
	v.expect(http.MethodGet, "/items/1", http.StatusOK)
	v.expect(http.MethodPut, "/items/1", http.StatusLocked)
}

// sharedSafeMethods checks Config.Shared with SharedSafeMethods: GET and HEAD requests on one
// resource hold it together (each handler waits until another is inside), a PUT while they
// hold it is busy (423), and a GET while a PUT holds it is busy too.
func sharedSafeMethods(t *testing.T, m Major) {
	v := newEnv(t, m)
	inside := make(chan struct{}, 2)
	leave := make(chan struct{})
	cfg := Config{SharedSafeMethods: true}
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		v.e.Add(method, "/accounts/:id", func(r Request) error {
			inside <- struct{}{}
			<-leave
			return r.NoContent(http.StatusOK)
		}, v.mw(cfg))
	}
	v.e.Add(http.MethodPut, "/accounts/:id", noContent, v.mw(cfg))

	codes := make(chan int, 2)
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		go func() { codes <- v.serve(method, "/accounts/7").Code }()
	}
	release := sync.OnceFunc(func() { close(leave) })
	t.Cleanup(release) // should a wait below fail
	recv(t, inside, "a reader inside")
	recv(t, inside, "the other reader inside at the same time")
	v.expect(http.MethodPut, "/accounts/7", http.StatusLocked) // beside two readers
	release()
	check(t, "a reader's status", recv(t, codes, "a reader"), http.StatusOK)
	check(t, "a reader's status", recv(t, codes, "a reader"), http.StatusOK)
	v.expect(http.MethodPut, "/accounts/7", http.StatusNoContent) // once the readers left
	v.hold("/accounts/:id", "7")                                  // a writer holds it
	v.expect(http.MethodGet, "/accounts/7", http.StatusLocked)

	// QUERY (RFC 10008) reads, where the major knows it (v5): it shares the lock with a
	// reader. Elsewhere it is exclusive, and busy beside the reader.
	v.e.Add(echofence.MethodQuery, "/reports/:id", func(r Request) error { return r.NoContent(http.StatusOK) }, v.mw(cfg))
	v.hold("/reports/:id", "7", fencing.Shared())
	want := http.StatusLocked
	if m.Query() {
		want = http.StatusOK
	}
	v.expect(echofence.MethodQuery, "/reports/7", want)
}
