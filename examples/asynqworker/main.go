// Command asynqworker runs an Asynq worker whose tasks are serialised per account by
// asynqfence, and shows a fenced store rejecting the late write of a worker whose lease ran
// out while it was stalled.
//
//	go run ./examples/asynqworker                                  # embedded miniredis
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/asynqworker        # or redis://host:port/db
//
// It enqueues deposits, runs them, then runs an asynqfence.Scheduler in three replicas (only
// the leader enqueues), prints a short report and exits: 0 when every balance adds up, the
// late write was rejected and every scheduled tick was processed once, 1 otherwise.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/servercheck"
	"github.com/fencekit/fencekit/tracing/asynqtrace"
)

func main() {
	os.Exit(run(context.Background(), os.Stdout, options{redisAddr: os.Getenv("REDIS_ADDR")}))
}

type options struct {
	redisAddr string // host:port or redis://… URL; empty: embedded miniredis
	unfenced  bool   // the ledger accepts stale writes (to show the failure)
}

// The workload: three deposits to each account, all enqueued at once.
var (
	accounts = []string{"alice", "bob", "carol"}
	amounts  = []int{10, 20, 30}
)

// waitLimit bounds every wait of the program.
const waitLimit = time.Minute

// run runs the demonstration and returns the exit code.
func run(ctx context.Context, out io.Writer, opts options) int {
	d, err := setup(opts)
	if err != nil {
		fmt.Fprintln(out, "asynqworker:", err)
		return 1
	}
	defer d.close()
	if err := d.run(ctx, out); err != nil {
		fmt.Fprintln(out, "FAIL:", err)
		return 1
	}
	fmt.Fprintln(out, "OK")
	return 0
}

// demo is one run's Redis, queue, server and bookkeeping.
type demo struct {
	where    string
	mini     *miniredis.Miniredis
	rdb      *redis.Client
	prefix   string // fencing key prefix, unique to the run
	queue    string // Asynq queue, unique to the run
	locker   *fencing.Locker
	ledger   *ledger
	worker   *worker
	ticks    ticks // the scheduled report tasks processed
	stalled  chan stall
	resume   chan struct{}
	mux      *asynq.ServeMux
	srv      *asynq.Server
	trace    *tracingSetup
	client   *asynq.Client
	insp     *asynq.Inspector
	busy     atomic.Int64 // busy attempts, seen by countBusy
	failed   atomic.Int64 // other failed attempts
	lastErr  atomic.Value // string: the last other failure
	warnings []string     // from servercheck.Check
}

func setup(opts options) (*demo, error) {
	d := &demo{ledger: newLedger(opts.unfenced), stalled: make(chan stall, 1), resume: make(chan struct{})}
	var ro *redis.Options
	switch {
	case opts.redisAddr == "":
		m, err := miniredis.Run()
		if err != nil {
			return nil, err
		}
		d.mini, d.where = m, "embedded miniredis"
		ro = &redis.Options{Addr: m.Addr()}
	case strings.Contains(opts.redisAddr, "://"):
		o, err := redis.ParseURL(opts.redisAddr)
		if err != nil {
			return nil, err
		}
		ro, d.where = o, fmt.Sprintf("Redis at %s, db %d", o.Addr, o.DB)
	default:
		ro, d.where = &redis.Options{Addr: opts.redisAddr}, "Redis at "+opts.redisAddr
	}
	ro.DisableIdentity = true
	// ContextTimeoutEnabled bounds every command by its context, so a hung Redis cannot hold
	// a task longer than its deadline.
	ro.ContextTimeoutEnabled = true
	d.rdb = redis.NewClient(ro)
	if err := d.rdb.Ping(context.Background()).Err(); err != nil {
		d.close()
		return nil, fmt.Errorf("%s: %w", d.where, err)
	}
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	d.prefix = "asynqworker:" + hex.EncodeToString(nonce[:]) + ":"
	d.queue = "asynqworker-" + hex.EncodeToString(nonce[:])
	tr, err := newTracing(os.Getenv("FENCEKIT_TRACE"), os.Stdout)
	if err != nil {
		d.close()
		return nil, err
	}
	d.trace = tr
	d.locker = fencing.New(d.rdb, fencing.WithPrefix(d.prefix), tr.Lock)
	// Refuse a server that may evict the fencing counters (allkeys-*); report other risks.
	report, err := servercheck.Check(context.Background(), d.locker)
	switch {
	case errors.Is(err, servercheck.ErrUnsafe):
		d.close()
		return nil, err
	case err != nil:
		d.warnings = append(d.warnings, "server settings not checked: "+err.Error())
	}
	d.warnings = append(d.warnings, report.Warnings...)
	d.client = asynq.NewClientFromRedisClient(d.rdb)
	d.insp = asynq.NewInspectorFromRedisClient(d.rdb)
	d.worker = newWorker(d.ledger, d.stalled, d.resume)

	mux := asynq.NewServeMux()
	d.mux = mux
	mux.Handle(typeDeposit, d.worker)
	mux.HandleFunc(typeReport, d.ticks.process)
	// With FENCEKIT_TRACE=stdout every job gets a span; the lock's spans nest inside it.
	mux.Use(d.countBusy)
	mux.Use(asynqtrace.Middleware(asynqtrace.WithTracerProvider(tr.Provider)))
	// A 1s lease keeps the demonstration quick: a busy deposit comes back after about the
	// holder's remaining lease. The lease is renewed while a deposit runs.
	mux.Use(asynqfence.Middleware(d.locker, accountOf, asynqfence.WithTTL(time.Second)))
	// ServerConfig makes a busy attempt no failure (it neither uses up retries nor counts in
	// the statistics), brings a busy task back when the lease would end, and keeps busy
	// errors away from the ErrorHandler; countBusy sees them before it.
	d.srv = asynq.NewServerFromRedisClient(d.rdb, asynqfence.ServerConfig(asynq.Config{
		Concurrency: 8,
		Queues:      map[string]int{d.queue: 1},
		// Real failures retry after 1s here; leave it nil for Asynq's default back-off.
		RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return time.Second },
		ErrorHandler: asynq.ErrorHandlerFunc(func(_ context.Context, _ *asynq.Task, err error) {
			d.failed.Add(1)
			d.lastErr.Store(err.Error())
		}),
		TaskCheckInterval:        50 * time.Millisecond,
		DelayedTaskCheckInterval: 200 * time.Millisecond,
		ShutdownTimeout:          3 * time.Second,
		Logger:                   quietLogger{},
	}))
	return d, nil
}

// close stops the server and removes what the run left in Redis.
func (d *demo) close() {
	if d.srv != nil {
		d.srv.Shutdown()
	}
	if d.trace != nil {
		_ = d.trace.Shutdown(context.Background())
	}
	if d.locker != nil {
		_ = d.locker.Close()
	}
	if d.mini == nil && d.insp != nil {
		_ = d.insp.DeleteQueue(d.queue, true)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for _, pattern := range []string{"asynq:{" + d.queue + "}:*", d.prefix + "*"} {
			iter := d.rdb.Scan(ctx, 0, pattern, 500).Iterator()
			for iter.Next(ctx) {
				d.rdb.Del(ctx, iter.Val())
			}
		}
		cancel()
	}
	if d.rdb != nil {
		_ = d.rdb.Close()
	}
	if d.mini != nil {
		d.mini.Close()
	}
}

func (d *demo) run(ctx context.Context, out io.Writer) error {
	fmt.Fprintf(out, "asynqworker: %s, queue %s, 8 workers\n", d.where, d.queue)
	for _, w := range d.warnings {
		fmt.Fprintf(out, "asynqworker: warning: %s\n", w)
	}
	if err := d.srv.Start(d.mux); err != nil {
		return err
	}
	want := make(map[string]int)

	// 1. Serialisation: every account's deposits run one at a time, and none is lost.
	fmt.Fprintf(out, "1. %d deposits to %d accounts, enqueued at once\n", len(accounts)*len(amounts), len(accounts))
	for i, amount := range amounts {
		for _, acct := range accounts {
			if err := d.enqueue(deposit{ID: fmt.Sprintf("%s-%d", acct, i+1), Account: acct, Amount: amount}); err != nil {
				return err
			}
			want[acct] += amount
		}
	}
	if err := d.waitIdle(ctx); err != nil {
		return err
	}
	most := d.worker.mostAtOnce()
	var problems []string
	for _, acct := range accounts {
		fmt.Fprintf(out, "   %-5s balance %3d (want %3d), last token %d\n", acct, d.ledger.Balance(acct), want[acct], d.ledger.Token(acct))
	}
	fmt.Fprintf(out, "   at most %d deposit(s) ran at once for one account; %d busy attempts came back later\n", most, d.busy.Load())
	if most != 1 {
		problems = append(problems, fmt.Sprintf("%d deposits ran at once for one account", most))
	}

	// 2. A stale write: a worker stalls holding alice's lock, its lease runs out, the next
	// deposit takes the lock, and the stalled worker then writes late with its old token.
	fmt.Fprintln(out, "2. a worker stalls while it holds alice's lock")
	if err := d.enqueue(deposit{ID: "alice-late", Account: "alice", Amount: 5, Stall: true}); err != nil {
		return err
	}
	want["alice"] += 5
	var st stall
	select {
	case st = <-d.stalled:
	case <-time.After(waitLimit):
		return errors.New("the stalling deposit did not start")
	}
	// The lease runs out as it would while the worker is paused: the lock key goes away
	// (its layout is documented: <prefix>{<resource>}:lock).
	if err := d.rdb.Del(ctx, d.prefix+"{account:alice}:lock").Err(); err != nil {
		return err
	}
	select {
	case <-st.ctx.Done():
		fmt.Fprintf(out, "   the stalled worker (token %d) lost its lease; its context was cancelled: %v\n", st.token, context.Cause(st.ctx))
	case <-time.After(waitLimit):
		return errors.New("the stalled worker's context was not cancelled")
	}
	if err := d.enqueue(deposit{ID: "alice-next", Account: "alice", Amount: 7}); err != nil {
		return err
	}
	want["alice"] += 7
	if err := waitFor(ctx, func() bool { return d.ledger.Token("alice") > st.token }); err != nil {
		return fmt.Errorf("the next deposit did not write: %w", err)
	}
	fmt.Fprintf(out, "   the next deposit took token %d and wrote\n", d.ledger.Token("alice"))
	close(d.resume)
	if err := d.waitIdle(ctx); err != nil {
		return err
	}
	late := d.entries("alice-late")
	switch {
	case len(late) == 0:
		problems = append(problems, "the stalled worker never wrote")
	case late[0].accepted:
		fmt.Fprintf(out, "   the stalled worker woke and wrote with token %d: ACCEPTED, a stale write\n", late[0].token)
		problems = append(problems, "the stale write was accepted")
	default:
		fmt.Fprintf(out, "   the stalled worker woke and wrote with token %d: rejected\n", late[0].token)
	}
	if len(late) > 1 && late[len(late)-1].accepted {
		fmt.Fprintf(out, "   Asynq retried that deposit; it wrote with token %d\n", late[len(late)-1].token)
	}

	// 3. The scheduler in every replica: one enqueue per tick, across a change of leader.
	more, err := d.schedule(ctx, out)
	if err != nil {
		return err
	}
	problems = append(problems, more...)

	// The books.
	fmt.Fprintln(out, "balances:")
	for _, acct := range accounts {
		got := d.ledger.Balance(acct)
		fmt.Fprintf(out, "   %-5s %3d (want %3d)\n", acct, got, want[acct])
		if got != want[acct] {
			problems = append(problems, fmt.Sprintf("%s has %d, want %d", acct, got, want[acct]))
		}
	}
	stale := 0
	for _, e := range d.ledger.Entries() {
		if e.accepted && e.deposit == "alice-late" && e.token == st.token {
			stale++
		}
	}
	qi, err := d.insp.GetQueueInfo(d.queue)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "asynq: processed %d, failed %d, archived %d; busy attempts %d (not failures)\n", qi.Processed, qi.Failed, qi.Archived, d.busy.Load())
	if qi.Archived != 0 {
		problems = append(problems, fmt.Sprintf("%d deposits archived", qi.Archived))
	}
	if last, _ := d.lastErr.Load().(string); last != "" {
		fmt.Fprintf(out, "   last failure: %s\n", strings.ReplaceAll(last, "\n", "; "))
	}
	fmt.Fprintf(out, "stale writes accepted: %d\n", stale)
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// enqueue adds a deposit to the queue, with three retries.
func (d *demo) enqueue(dep deposit) error {
	payload, err := json.Marshal(dep)
	if err != nil {
		return err
	}
	_, err = d.client.Enqueue(asynq.NewTask(typeDeposit, payload), asynq.Queue(d.queue), asynq.MaxRetry(3))
	return err
}

// waitIdle waits until the queue has nothing pending, running, scheduled or to retry.
func (d *demo) waitIdle(ctx context.Context) error {
	err := waitFor(ctx, func() bool {
		qi, err := d.insp.GetQueueInfo(d.queue)
		return err == nil && qi.Pending+qi.Active+qi.Scheduled+qi.Retry == 0
	})
	if err != nil {
		return fmt.Errorf("the queue did not drain: %w", err)
	}
	return nil
}

// entries returns the ledger's writes for one deposit.
func (d *demo) entries(deposit string) []entry {
	es := d.ledger.Entries()
	return slices.DeleteFunc(es, func(e entry) bool { return e.deposit != deposit })
}

// waitFor polls cond until it holds, for at most waitLimit.
func waitFor(ctx context.Context, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// quietLogger keeps Asynq's own logs out of the report.
type quietLogger struct{}

func (quietLogger) Debug(...any) {}
func (quietLogger) Info(...any)  {}
func (quietLogger) Warn(...any)  {}
func (quietLogger) Error(...any) {}
func (quietLogger) Fatal(...any) {}

// countBusy counts the attempts that found their account busy (asynqfence.IsBusy).
func (d *demo) countBusy(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		err := next.ProcessTask(ctx, t)
		if asynqfence.IsBusy(err) {
			d.busy.Add(1)
		}
		return err
	})
}
