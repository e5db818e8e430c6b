package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hibiken/asynq"
	"github.com/labstack/echo/v4"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
	fencemw "github.com/fencekit/fencekit/middleware"
	"github.com/fencekit/fencekit/store"
)

// transfers is the transfer half of one run: money moves between accounts of their own, each
// transfer under the locks of both accounts (Locker.DoAll, through the Echo middleware's
// KeysExtractor and asynqfence.MiddlewareAll), each of its two writes fenced by its own
// account's token. The accounts start at 0 and may go negative: the money in them must stay 0
// in all.
type transfers struct {
	c *counted // the ledger, counting the transfers' writes apart from the deposits'

	mu       sync.Mutex
	expected map[string]int64 // each account's balance after the acknowledged transfers
	done     int64            // acknowledged transfers
}

// move is the protected read-modify-write of two accounts: it runs inside DoAll, with both
// accounts' tokens in ctx, and writes both rows at once, each with its own account's token
// (one SQL transaction, see docs/resources.md), so that a refused row rolls back the other.
func (x *transfers) move(ctx context.Context, from, to string) error {
	tf, ok1 := fencing.TokenFor(ctx, "account:"+from)
	tt, ok2 := fencing.TokenFor(ctx, "account:"+to)
	if !ok1 || !ok2 {
		return errors.New("transfer without both locks")
	}
	bf, err := x.c.read(ctx, from)
	if err != nil {
		return err
	}
	bt, err := x.c.read(ctx, to)
	if err != nil {
		return err
	}
	return x.write(ctx, from, to, bf-1, bt+1, tf, tt)
}

// write writes both balances of a transfer at once and, when they went through, counts it.
func (x *transfers) write(ctx context.Context, from, to string, bf, bt, tf, tt int64) error {
	if err := x.c.writeTwo(ctx, two{from, bf, tf}, two{to, bt, tt}); err != nil {
		return err
	}
	x.mu.Lock()
	x.expected[from]--
	x.expected[to]++
	x.done++
	x.mu.Unlock()
	return nil
}

// pair returns two different accounts of ids, in random order.
func pair(rng *rand.Rand, ids []string) (string, string) {
	i := rng.IntN(len(ids))
	j := (i + 1 + rng.IntN(len(ids)-1)) % len(ids)
	return ids[i], ids[j]
}

// httpTransfers sends cfg.transfers transfers through an Echo server whose route
// POST /transfer/:from/:to locks both accounts with the middleware's KeysExtractor.
func (e *env) httpTransfers(ctx context.Context, cfg config, locker *fencing.Locker, ids []string, x *transfers) error {
	mw, err := fencemw.Config{
		Locker:    locker,
		Namespace: "account",
		KeysExtractor: func(c echo.Context) ([]string, error) {
			return []string{c.Param("from"), c.Param("to")}, nil
		},
		MaxWait: waitLimit,
	}.ToMiddleware()
	if err != nil {
		return err
	}
	srv := echo.New()
	srv.HideBanner, srv.HidePort = true, true
	srv.POST("/transfer/:from/:to", func(c echo.Context) error {
		err := x.move(c.Request().Context(), c.Param("from"), c.Param("to"))
		switch {
		case errors.Is(err, store.ErrStaleToken):
			return echo.NewHTTPError(http.StatusConflict, "stale fencing token")
		case err != nil:
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}, mw)
	ts := httptest.NewServer(srv)
	defer ts.Close()

	rng := rand.New(rand.NewPCG(1, 2))
	work := make(chan [2]string)
	var failed atomic.Value
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for p := range work {
				// 423: the set could not be taken (on miniredis, a paused holder's clock jump
				// can expire a lock taken while the request waited for the other): send it
				// again, as a client would.
				for try := 0; ; try++ {
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/transfer/"+p[0]+"/"+p[1], nil)
					resp, err := ts.Client().Do(req)
					if err != nil {
						failed.Store(err)
						break
					}
					_ = resp.Body.Close()
					if resp.StatusCode == http.StatusLocked && try < 5 {
						continue
					}
					if resp.StatusCode != http.StatusNoContent {
						failed.Store(fmt.Errorf("POST /transfer/%s/%s: %s", p[0], p[1], resp.Status))
					}
					break
				}
			}
		})
	}
	for range cfg.transfers {
		from, to := pair(rng, ids)
		work <- [2]string{from, to}
	}
	close(work)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	return nil
}

// jobTransfers runs cfg.transferJobs transfers as Asynq tasks "transfer" with the payload
// "<from>,<to>", locked with asynqfence.MiddlewareAll.
func (e *env) jobTransfers(ctx context.Context, cfg config, locker *fencing.Locker, ids []string, run string, x *transfers) error {
	mw := asynqfence.MiddlewareAll(locker, func(t *asynq.Task) ([]string, error) {
		from, to, ok := strings.Cut(string(t.Payload()), ",")
		if !ok {
			return nil, fmt.Errorf("payload %q: want <from>,<to>", t.Payload())
		}
		return []string{"account:" + from, "account:" + to}, nil
	}, asynqfence.WithLockOptions(fencing.WithMaxWait(waitLimit)))
	rng := rand.New(rand.NewPCG(3, 4))
	payloads := make([]string, cfg.transferJobs)
	for i := range payloads {
		from, to := pair(rng, ids)
		payloads[i] = from + "," + to
	}
	return e.runTasks(ctx, e.queue(run)+"-transfers", mw, "transfer", payloads, func(ctx context.Context, payload string) error {
		from, to, _ := strings.Cut(payload, ",")
		return x.move(ctx, from, to)
	})
}

// pausedTransfers plays the paused holder with two accounts, cfg.pauses times per pair of
// neighbours: it locks both with AcquireAll, reads both balances, pauses past its lease,
// another transfer between the same accounts goes through, and the paused holder wakes and
// writes both balances it computed before the pause, each with its own stale token.
func (e *env) pausedTransfers(ctx context.Context, cfg config, locker *fencing.Locker, ids []string, x *transfers) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	for i := range ids {
		from, to := ids[i], ids[(i+1)%len(ids)]
		wg.Go(func() {
			for range cfg.pauses {
				if err := e.onePausedTransfer(ctx, locker, from, to, x); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (e *env) onePausedTransfer(ctx context.Context, locker *fencing.Locker, from, to string, x *transfers) error {
	resources := []string{"account:" + from, "account:" + to}
	set, err := locker.AcquireAll(ctx, resources, fencing.WithTTL(e.pauseTTL))
	for errors.Is(err, fencing.ErrNotHeld) {
		// The short lease of the first account ran out while the holder waited for the
		// second (on miniredis, another paused holder moved the server's clock): AcquireAll
		// released the set; take it again.
		set, err = locker.AcquireAll(ctx, resources, fencing.WithTTL(e.pauseTTL))
	}
	if err != nil {
		return err
	}
	bf, err := x.c.read(ctx, from)
	if err != nil {
		return err
	}
	bt, err := x.c.read(ctx, to)
	if err != nil {
		return err
	}
	e.pause(2 * e.pauseTTL) // both leases run out while the holder is stopped
	if err := locker.DoAll(ctx, resources, func(ctx context.Context) error { return x.move(ctx, from, to) }); err != nil {
		return err
	}
	// The paused holder wakes and writes what it computed before the pause.
	err = x.write(ctx, from, to, bf-1, bt+1, set.Token("account:"+from), set.Token("account:"+to))
	if err != nil && !errors.Is(err, store.ErrStaleToken) {
		return err
	}
	if err := set.Release(ctx); err != nil && !errors.Is(err, fencing.ErrNotHeld) {
		return err
	}
	return nil
}

// transferResult is the transfer half of a run's figures.
type transferResult struct {
	transfers     int64 // transfers whose two writes the ledger acknowledged
	staleAccepted int64 // the transfers' writes with a token below one already written, that got through
	staleRejected int64 // the transfers' writes refused with store.ErrStaleToken
	money         int64 // the money in the transfer accounts at the end: 0 when conserved
	off           int64 // accounts whose balance differs from what the acknowledged transfers make it
}

// result returns the figures of x once the run is over.
func (x *transfers) result(ctx context.Context, l ledger, ids []string) (transferResult, error) {
	r := transferResult{transfers: x.done, staleAccepted: x.c.stale, staleRejected: x.c.rejected}
	for _, id := range ids {
		b, err := l.read(ctx, id)
		if err != nil {
			return r, err
		}
		r.money += b
		if b != x.expected[id] {
			r.off++
		}
	}
	return r, nil
}
