package store

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// The concurrency tests share one shape: writers holding tokens 1..n, each token held
// by two writers (one acquisition writing twice), started in a jittered token order,
// so stale and fresh tokens interleave. Where one write takes a network round trip,
// the launcher keeps at most inFlight writes running, or the highest tokens would
// arrive before most others and little would interleave. Every check must then show
//   - zero stale writes accepted: the accepted writes, in the order the store applied
//     them, carry non-decreasing tokens;
//   - no fresh write lost: every write reported as accepted is in the store's
//     history, the final mark is n, and the final value was written with token n;
//   - every refusal is a *StaleTokenError whose mark is above the refused token.
//
// Memory and PostgreSQL record the order of applied writes (inside fn, and with
// array_append in the SET list). Redis cannot, so its test checks what real time
// shows instead: no write accepted after an accepted higher token's write ended, and
// no writer reading back a mark below its own accepted token.

// inFlight bounds the concurrent writes to Redis and PostgreSQL.
const inFlight = 32

// writer is one goroutine of a concurrency test.
type writer struct {
	id    int
	token int64
}

// schedule returns two writers for each token 1..n, roughly in token order but
// shuffled within a window, so that stale writers keep arriving after fresh ones.
func schedule(t testing.TB, n int) []writer {
	t.Helper()
	const window = 16
	type keyed struct {
		w   writer
		key int
	}
	ks := make([]keyed, 0, 2*n)
	for tok := 1; tok <= n; tok++ {
		for range 2 {
			ks = append(ks, keyed{writer{token: int64(tok)}, tok + rand.IntN(window)})
		}
	}
	slices.SortStableFunc(ks, func(a, b keyed) int { return a.key - b.key })
	ws := make([]writer, len(ks))
	for i, k := range ks {
		ws[i] = k.w
		ws[i].id = i
	}
	return ws
}

// runAll runs write for every writer, at most inFlight at a time, and returns their
// errors in the writers' order.
func runAll(ws []writer, write func(w writer) error) []error {
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	sem := make(chan struct{}, inFlight)
	for i, w := range ws {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = write(w)
		})
	}
	wg.Wait()
	return errs
}
