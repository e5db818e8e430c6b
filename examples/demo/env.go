package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
	fencemw "github.com/fencekit/fencekit/middleware"
	"github.com/fencekit/fencekit/servercheck"
	"github.com/fencekit/fencekit/store"
)

// pauseTTL is the lease of the holders that pause on a real Redis; they stay paused for
// twice as long.
const pauseTTL = 250 * time.Millisecond

// miniJumps bounds the sum of one run's pauses on miniredis, where a pause moves the server's
// clock for every key at once: it must stay below the lease of a grant from the queue (3s,
// extended to the asked TTL a second later in real time, which miniredis does not count), or
// a pause would end the lease of a holder that is not paused, and the demo would count that
// holder's refused write as a paused one's.
const miniJumps = time.Second

// waitLimit bounds every wait in the demo.
const waitLimit = 2 * time.Minute

// env is the Redis the demo runs on.
type env struct {
	where    string
	mini     *miniredis.Miniredis
	opt      *redis.Options
	rdb      *redis.Client
	prefix   string
	pauseTTL time.Duration // the lease of the holders that pause; they stay paused for twice as long
}

func newEnv(cfg config) (*env, error) {
	e := &env{prefix: fmt.Sprintf("fencekit-demo:%d:", os.Getpid()), pauseTTL: pauseTTL}
	if cfg.redisAddr == "" {
		m, err := miniredis.Run()
		if err != nil {
			return nil, err
		}
		e.mini, e.where = m, "embedded miniredis"
		e.opt = &redis.Options{Addr: m.Addr()}
		if n := 2 * cfg.pauses * (cfg.accounts + cfg.transferAccounts); n > 0 {
			e.pauseTTL = max(miniJumps/time.Duration(n), fencing.MinTTL)
		}
	} else if strings.Contains(cfg.redisAddr, "://") {
		opt, err := redis.ParseURL(cfg.redisAddr) // redis://host:port/db
		if err != nil {
			return nil, err
		}
		e.where, e.opt = fmt.Sprintf("%s, db %d", opt.Addr, opt.DB), opt
	} else {
		e.where = cfg.redisAddr
		e.opt = &redis.Options{Addr: cfg.redisAddr}
	}
	// ContextTimeoutEnabled bounds every command by its context, so a hung Redis cannot
	// hold a caller longer than its deadline.
	e.opt.ContextTimeoutEnabled = true
	e.rdb = redis.NewClient(e.opt)
	if err := e.rdb.Ping(context.Background()).Err(); err != nil {
		e.close()
		return nil, fmt.Errorf("redis at %s: %w", e.where, err)
	}
	return e, nil
}

// checkServer checks the server's settings once, as a service would at start: it refuses an
// allkeys-* eviction policy, which can evict the fencing counters, and prints other risks
// to w. Settings that cannot be read (miniredis implements neither CONFIG nor these INFO
// sections) are reported and the demo goes on.
func (e *env) checkServer(ctx context.Context, w io.Writer) error {
	locker := fencing.New(e.rdb, fencing.WithPrefix(e.prefix))
	defer locker.Close()
	report, err := servercheck.Check(ctx, locker)
	switch {
	case errors.Is(err, servercheck.ErrUnsafe):
		return err
	case err != nil && e.mini == nil:
		fmt.Fprintf(w, "server settings not checked: %v\n", err)
	}
	for _, warning := range report.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warning)
	}
	return nil
}

func (e *env) close() {
	if e.mini == nil {
		// On a shared Redis, remove the demo's keys: its fence counters and its queues.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := e.rdb.Scan(ctx, 0, e.prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			e.rdb.Del(ctx, iter.Val())
		}
		insp := asynq.NewInspectorFromRedisClient(e.rdb)
		for _, queue := range []string{e.queue("with-checks"), e.queue("without-checks"),
			e.queue("with-checks") + "-transfers", e.queue("without-checks") + "-transfers"} {
			_ = insp.DeleteQueue(queue, true)
			// DeleteQueue leaves the queue's statistics (processed and failed counters).
			iter := e.rdb.Scan(ctx, 0, "asynq:{"+queue+"}:*", 1000).Iterator()
			for iter.Next(ctx) {
				e.rdb.Del(ctx, iter.Val())
			}
		}
	}
	_ = e.rdb.Close()
	if e.mini != nil {
		e.mini.Close()
	}
}

// queue names the Asynq queue of one run.
func (e *env) queue(run string) string { return fmt.Sprintf("fencekit-demo-%d-%s", os.Getpid(), run) }

// pause stands for a holder's process being stopped for d: Redis time moves on.
func (e *env) pause(d time.Duration) {
	if e.mini != nil {
		e.mini.FastForward(d) // miniredis TTLs move only when told
		return
	}
	time.Sleep(d)
}

// runOnce runs the workload against l and measures what happened to the writes.
func (e *env) runOnce(ctx context.Context, cfg config, l ledger, fenced bool, progress io.Writer) (result, error) {
	ids := make([]string, cfg.accounts)
	for i := range ids {
		ids[i] = "acct-" + strconv.Itoa(i+1)
	}
	tids := make([]string, cfg.transferAccounts)
	for i := range tids {
		tids[i] = "tacct-" + strconv.Itoa(i+1)
	}
	if err := l.reset(ctx, append(slices.Clone(ids), tids...)); err != nil {
		return result{}, err
	}
	c := &counted{ledger: l, top: map[string]int64{}}
	x := &transfers{c: &counted{ledger: l, top: map[string]int64{}}, expected: map[string]int64{}}
	run := "with-checks"
	if !fenced {
		run = "without-checks"
	}
	locker := fencing.New(e.rdb, fencing.WithPrefix(e.prefix+run+":"))
	defer locker.Close()

	// deposit is the protected read-modify-write: it runs under the account's lock, with
	// the lock's token in ctx.
	deposit := func(ctx context.Context, id string) error {
		token, ok := fencing.TokenFromContext(ctx)
		if !ok {
			return errors.New("deposit without a lock")
		}
		bal, err := c.read(ctx, id)
		if err != nil {
			return err
		}
		return c.write(ctx, id, bal+1, token)
	}

	stop := showProgress(progress, run, c, cfg)
	begin := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	wg.Add(1)
	go func() { defer wg.Done(); errs <- e.httpDeposits(ctx, cfg, locker, ids, deposit) }()
	wg.Add(1)
	go func() { defer wg.Done(); errs <- e.jobDeposits(ctx, cfg, locker, ids, run, deposit) }()
	wg.Add(1)
	go func() { defer wg.Done(); errs <- e.pausedHolders(ctx, cfg, locker, ids, c, deposit) }()
	if len(tids) > 1 {
		wg.Go(func() { errs <- e.httpTransfers(ctx, cfg, locker, tids, x) })
		wg.Go(func() { errs <- e.jobTransfers(ctx, cfg, locker, tids, run, x) })
		wg.Go(func() { errs <- e.pausedTransfers(ctx, cfg, locker, tids, x) })
	}
	wg.Wait()
	elapsed := time.Since(begin)
	stop()
	close(errs)
	for err := range errs {
		if err != nil {
			return result{}, err
		}
	}

	var sum int64
	for _, id := range ids {
		b, err := l.read(ctx, id)
		if err != nil {
			return result{}, err
		}
		sum += b
	}
	tr, err := x.result(ctx, l, tids)
	if err != nil {
		return result{}, err
	}
	return result{
		t:             tr,
		deposits:      c.accepted,
		staleAccepted: c.stale,
		staleRejected: c.rejected,
		lost:          c.accepted - sum,
		elapsed:       elapsed,
	}, nil
}

// httpDeposits sends cfg.requests deposits through an Echo server that locks each request's
// account with the fencekit middleware.
func (e *env) httpDeposits(ctx context.Context, cfg config, locker *fencing.Locker, ids []string, deposit func(context.Context, string) error) error {
	mw, err := fencemw.Config{Locker: locker, Namespace: "account", MaxWait: waitLimit}.ToMiddleware()
	if err != nil {
		return err
	}
	srv := echo.New()
	srv.HideBanner, srv.HidePort = true, true
	srv.POST("/accounts/:id/deposit", func(c echo.Context) error {
		err := deposit(c.Request().Context(), c.Param("id"))
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

	work := make(chan string)
	var failed atomic.Value
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/accounts/"+id+"/deposit", nil)
				resp, err := ts.Client().Do(req)
				if err != nil {
					failed.Store(err)
					continue
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent {
					failed.Store(fmt.Errorf("POST /accounts/%s/deposit: %s", id, resp.Status))
				}
			}
		}()
	}
	for i := range cfg.requests {
		work <- ids[i%len(ids)]
	}
	close(work)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	return nil
}

// jobDeposits runs cfg.jobs deposits as Asynq tasks, locked per account by asynqfence.
func (e *env) jobDeposits(ctx context.Context, cfg config, locker *fencing.Locker, ids []string, run string, deposit func(context.Context, string) error) error {
	mw := asynqfence.Middleware(locker, func(t *asynq.Task) (string, error) {
		return "account:" + string(t.Payload()), nil
	}, asynqfence.WithLockOptions(fencing.WithMaxWait(waitLimit)))
	payloads := make([]string, cfg.jobs)
	for i := range payloads {
		payloads[i] = ids[i%len(ids)]
	}
	return e.runTasks(ctx, e.queue(run), mw, "deposit", payloads, deposit)
}

// runTasks runs one Asynq task of type kind per payload on queue, through mw, handle doing
// each task's work (its error fails the task without a retry), and returns once every task
// has run, with an error when some failed.
func (e *env) runTasks(ctx context.Context, queue string, mw asynq.MiddlewareFunc, kind string, payloads []string, handle func(context.Context, string) error) error {
	conn := asynq.RedisClientOpt{Addr: e.opt.Addr, DB: e.opt.DB}
	var done, failed atomic.Int64
	srv := asynq.NewServer(conn, asynqfence.ServerConfig(asynq.Config{
		Concurrency:       8,
		Queues:            map[string]int{queue: 1},
		TaskCheckInterval: 20 * time.Millisecond,
		Logger:            quiet{},
		LogLevel:          asynq.FatalLevel,
	}))
	mux := asynq.NewServeMux()
	mux.Use(mw)
	mux.HandleFunc(kind, func(ctx context.Context, t *asynq.Task) error {
		if err := handle(ctx, string(t.Payload())); err != nil {
			failed.Add(1)
			return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
		}
		done.Add(1)
		return nil
	})
	if err := srv.Start(mux); err != nil {
		return err
	}
	defer srv.Shutdown()
	client := asynq.NewClient(conn)
	defer client.Close()
	for _, p := range payloads {
		if _, err := client.EnqueueContext(ctx, asynq.NewTask(kind, []byte(p)), asynq.Queue(queue), asynq.MaxRetry(3)); err != nil {
			return err
		}
	}
	return awaitTasks(&done, &failed, len(payloads), kind+" tasks")
}

// awaitTasks waits until done and failed count n tasks, for at most waitLimit, and returns an
// error naming what (jobs, transfers) when some failed or are still running.
func awaitTasks(done, failed *atomic.Int64, n int, what string) error {
	deadline := time.Now().Add(waitLimit)
	for done.Load()+failed.Load() < int64(n) {
		if time.Now().After(deadline) {
			return fmt.Errorf("asynq: %d of %d %s done after %v", done.Load(), n, what, waitLimit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if k := failed.Load(); k > 0 {
		return fmt.Errorf("asynq: %d %s failed", k, what)
	}
	return nil
}

// pausedHolders plays Kleppmann's scenario cfg.pauses times per account: a holder reads the
// balance, pauses past its lease, another writer takes the lock and deposits, and the
// paused holder wakes up and writes the balance it computed before the pause.
func (e *env) pausedHolders(ctx context.Context, cfg config, locker *fencing.Locker, ids []string, c *counted, deposit func(context.Context, string) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range cfg.pauses {
				if err := e.onePause(ctx, locker, id, c, deposit); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (e *env) onePause(ctx context.Context, locker *fencing.Locker, id string, c *counted, deposit func(context.Context, string) error) error {
	resource := "account:" + id
	lock, err := locker.Acquire(ctx, resource, fencing.WithTTL(e.pauseTTL))
	if err != nil {
		return err
	}
	bal, err := c.read(ctx, id)
	if err != nil {
		return err
	}
	e.pause(2 * e.pauseTTL) // the lease runs out while the holder is stopped
	if err := locker.Do(ctx, resource, func(ctx context.Context) error { return deposit(ctx, id) }); err != nil {
		return err
	}
	// The paused holder wakes and writes what it computed before the pause.
	if err := c.write(ctx, id, bal+1, lock.Token()); err != nil && !errors.Is(err, store.ErrStaleToken) {
		return err
	}
	if err := lock.Release(ctx); err != nil && !errors.Is(err, fencing.ErrNotHeld) {
		return err
	}
	return nil
}

// showProgress keeps one line up to date with the number of writes so far.
func showProgress(w io.Writer, run string, c *counted, cfg config) (stop func()) {
	total := cfg.requests + cfg.jobs + 2*cfg.accounts*cfg.pauses
	done := make(chan struct{})
	var wg sync.WaitGroup
	line := func() {
		c.mu.Lock()
		n := c.accepted + c.rejected
		c.mu.Unlock()
		fmt.Fprintf(w, "\r%-15s %4d/%d writes", run, n, total)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				line()
				fmt.Fprintln(w)
				return
			case <-t.C:
				line()
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// quiet drops Asynq's log output.
type quiet struct{}

func (quiet) Debug(...any) {}
func (quiet) Info(...any)  {}
func (quiet) Warn(...any)  {}
func (quiet) Error(...any) {}
func (quiet) Fatal(...any) {}
