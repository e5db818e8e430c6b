// Package asynqfence runs Asynq task handlers under a fenced lock: one task per resource at a
// time across every worker, with the lock's fencing token in the handler's context.
//
// Wrap one handler with [Wrap], or every handler of an [asynq.ServeMux] with [Middleware]:
//
//	locker := fencing.New(rdb)
//	mux := asynq.NewServeMux()
//	mux.Use(asynqfence.Middleware(locker, func(t *asynq.Task) (string, error) {
//		switch t.Type() {
//		case "invoice:send":
//			var p InvoicePayload
//			if err := json.Unmarshal(t.Payload(), &p); err != nil {
//				return "", err
//			}
//			return "invoice:" + p.ID, nil
//		}
//		return "", nil // no lock: other task types, unknown ones included, pass through
//	}))
//	// Busy is not a failure, comes back when the lease would end, and is kept out of the
//	// ErrorHandler; other settings are yours.
//	srv := asynq.NewServer(redisOpt, asynqfence.ServerConfig(asynq.Config{Concurrency: 10}))
//	err := srv.Run(mux)
//
// # Which resource
//
// A [ResourceFunc] names the resource from the task's type and payload. An empty name means
// the task needs no lock: its handler runs as it is, with no token in its context. A ServeMux
// runs its middleware around its not-found handler too, so return "" for the task types you do
// not lock, unknown ones included: they pass straight through, and Asynq fails an unknown type
// as it always does. When the ResourceFunc returns an error, the handler does not run and the
// task fails with [asynq.SkipRetry]: the same payload would fail the same way on every retry,
// so the task is archived at once, where the Inspector and the web UI show it with the error.
//
// # Several resources
//
// [MiddlewareAll] takes a [ResourcesFunc] that names several resources, such as both accounts
// of a transfer, and runs the handler under [fencing.Locker.DoAll] of all of them:
// deadlock-free whatever their order, each with its own token ([fencing.TokenFor]).
//
// # An entity beside a limit
//
// [WithEntity] names, beside the resource, an entity of the task's own to lock exclusively
// (the export a task writes, while the tenant allows two exports at once with [WithLimit]):
// one middleware takes the entity's lock and a slot of the resource as one step, tried
// once; if either is busy neither is held and the task is busy. The handler's
// [fencing.TokenFromContext] is then the entity's token, the one that fences the entity's
// writes; the slot's token only orders the slot's holders ([fencing.TokenFor] gives each).
//
//	mux.Use(asynqfence.Middleware(locker, tenantOf, asynqfence.WithLimit(2), asynqfence.WithEntity(exportOf)))
//
// # When the resource is busy
//
// Each attempt tries the lock once (per-call [fencing.WithMaxWait](0)). When another owner
// holds it, the handler does not run, and ProcessTask returns a busy error ([IsBusy] reports
// it) that wraps the core's: it matches [fencing.ErrNotAcquired], and [fencing.RetryAfter]
// reports the holder's remaining lease. Asynq has no way for a handler to say "come back
// later, this is not a failure", so [ServerConfig] plugs the adapter into [asynq.Config],
// chained in front of the settings you made:
//
//   - [IsFailure]: a busy task is not a failure, so Asynq neither increments its retry count
//     nor counts it in the queue's processed and failed statistics;
//   - [RetryDelay]: a busy task comes back after about the holder's remaining lease, spread
//     over at least 4 whole seconds, instead of after Asynq's exponential back-off;
//   - an ErrorHandler that drops busy errors ([IsBusy]) before yours;
//   - a DelayedTaskCheckInterval of 1s unless you set one.
//
// Without them a busy task counts as failed and uses up its retries.
//
// The trap: Asynq archives a task that has used up its retries before it consults IsFailure.
// A task enqueued with asynq.MaxRetry(0), or one that has used its retries on real failures,
// is archived (and counted as failed) the first time its resource is busy. Give fenced task
// types at least one retry.
//
// Without ServerConfig, Asynq's ErrorHandler receives every busy error; filter them with
// [IsBusy].
//
// A setup that cannot work (a nil Locker or handler, a TTL out of range, a resource name over
// [fencing.MaxResourceLen]) fails every task with an error matching both [fencing.ErrInvalid]
// and [asynq.SkipRetry], so Asynq archives it at once rather than retrying it.
//
// To drop duplicates rather than serialise them, use [WithDropDuplicates]: a task whose
// resource is busy is revoked ([asynq.RevokeTask]), neither retried nor archived.
//
// Busy tasks cost a dequeue and a trip through the retry set each time, and may run in a
// different order than they were enqueued. To wait for the lock inside the handler instead,
// for a while, pass [WithLockOptions]([fencing.WithMaxWait](d)); the worker is then occupied
// while it waits.
//
// # While the handler runs
//
// The handler runs inside [fencing.Locker.Do]. Its context carries the fencing token
// ([fencing.TokenFromContext]); pass the token with every write. The lease is renewed in the
// background every third of its TTL. Its TTL is the Locker's (the [fencing.WithTTL] given to
// [fencing.New], [fencing.DefaultTTL] (30s) by default), the same lease every other caller of
// that Locker gets; [WithTTL] sets another for the adapter alone. A task's deadline does not
// change it (Asynq's default timeout is 30 minutes, and a worker that crashes keeps its
// resources locked for up to one TTL). Busy tasks come back after about one TTL. When the lock is lost,
// the handler's context is cancelled with a cause matching [fencing.ErrNotHeld] (see
// [context.Cause]); the handler should stop and return an error, which then matches
// ErrNotHeld too, and Asynq retries the task as after any failure. A handler whose write a
// fenced store refused returns an error matching store.ErrStaleToken: a newer holder's
// token had passed its own, so it lost the lock too, even if no renewal has noticed it yet;
// its error is made to match ErrNotHeld as well, and the task is retried the same way. A
// handler that returns
// nil has succeeded, whatever happened to its lease meanwhile: the store has accepted or
// rejected each of its writes, and running the task again would only repeat them. (Observe
// lost leases with fencing.WithHooks, passed through [WithLockOptions].)
//
// Every acquisition gets a random owner value, so each attempt of a task is a different
// owner even though Asynq keeps the task ID across retries: a second delivery of the same
// task can neither release nor extend the first one's lock. It is labelled with the task's
// ID ([fencing.WithLabel]; fitted to [fencing.MaxLabelLen] bytes, keeping its start and its
// end, when a custom ID is longer), which [fencing.Locker.Inspect] and the fencekit tool
// show beside the holder; a fencing.WithLabel in [WithLockOptions] labels it instead. The lock is released when the
// handler returns, with a fresh context (the handler's may be done), as Asynq itself does for
// its own bookkeeping after a task.
//
// # Errors
//
// The Locker's errors come back as they are, their text starting "fencing: " and naming the
// resource, joined with [asynq.SkipRetry] or [asynq.RevokeTask] where the adapter adds one,
// by fmt.Errorf("%w: %w") ("fencing: ...: skip retry for the task"). The errors the adapter
// makes itself start with "asynqfence: ", once (`asynqfence: resource of task
// "invoice:send": bad payload`), and never carry another fencekit package's text: they
// match the sentinels they stand for with errors.Is instead. No text carries two packages'
// prefixes or a segment twice. Match errors with errors.Is and [IsBusy], not by their text.
//
// # Scheduling in every replica
//
// [Scheduler] replaces asynq.Scheduler when the service runs in several replicas: every
// replica runs it with the same name and entries, [fencing.Locker.Lead] elects one leader,
// and only the leader enqueues. Each tick is enqueued once across failovers (its task ID is
// made of the name, the entry and the tick's time, and a duplicate is refused by Asynq); a
// tick missed while no replica led is enqueued by the next leader when it is at most one
// period late ([WithCatchUp]); a dead leader's ticks wait at most its lease plus a period.
// Processing stays Asynq's at-least-once. The handler reads the tick its task was enqueued
// for with [TickOf] (a task header, [TickHeader], kept through retries and archiving).
//
//	s := asynqfence.NewScheduler(client, locker, "billing")
//	s.Register("@every 30s", asynq.NewTask("invoices:send", nil))
//	err := s.Run(ctx) // in every replica
//	// in the handler of "invoices:send":
//	tick, ok := asynqfence.TickOf(task)
//
// # Limits
//
// A lease can lapse while its holder still runs (a paused process, a slow network, a Redis
// failover), and Asynq delivers tasks at least once, so two attempts of one task can run at
// the same time. The lock makes that rare; only a store that checks the token makes it
// harmless: send the token with every write and have the store reject a token lower than
// one it has already seen.
package asynqfence
