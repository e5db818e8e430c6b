package asynqfence

import (
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/fencing"
)

const (
	// minBusyDelay is the shortest busy retry delay: Asynq stores retry times in whole
	// seconds.
	minBusyDelay = time.Second
	// minBusySpread is the narrowest window over which busy retries are spread: several
	// whole seconds, so that tasks that found a resource busy together come back in
	// different seconds rather than all in the next one.
	minBusySpread = 4 * time.Second
)

// IsFailure returns a function for [asynq.Config].IsFailure that reports busy errors
// ([IsBusy]) as no failure, so a busy task is retried without incrementing its retry count
// and without counting in the queue's processed and failed statistics. Other errors go to
// next; a nil next stands for Asynq's default, which reports every non-nil error as a
// failure.
//
// Asynq archives a task that has used up its retries before it calls IsFailure, so a busy
// task enqueued with asynq.MaxRetry(0) is archived all the same.
func IsFailure(next func(error) bool) func(error) bool {
	return func(err error) bool {
		switch {
		case IsBusy(err):
			return false
		case next != nil:
			return next(err)
		}
		return err != nil
	}
}

// RetryDelay returns a function for [asynq.Config].RetryDelayFunc that brings a busy task
// ([IsBusy]) back after the holder's remaining lease ([fencing.RetryAfter]), at least 1s,
// plus a random delay spread evenly over a quarter of it or 4s, whichever is longer. Asynq
// keeps retry times in whole seconds and moves due tasks every
// Config.DelayedTaskCheckInterval (5s by default; [ServerConfig] makes it 1s), so with a
// short lease a spread below a few seconds would bring every busy task back in the same
// second, where all but one find the resource busy again. Other errors go to next; a nil
// next stands for [asynq.DefaultRetryDelayFunc].
//
// A lease is renewed while its holder runs, so the delay is the longest the resource stays
// locked if the holder stops, not when it will be free: a short lease ([WithTTL]) brings busy
// tasks back sooner.
func RetryDelay(next asynq.RetryDelayFunc) asynq.RetryDelayFunc {
	if next == nil {
		next = asynq.DefaultRetryDelayFunc
	}
	return func(n int, err error, t *asynq.Task) time.Duration {
		if !IsBusy(err) {
			return next(n, err, t)
		}
		d, _ := fencing.RetryAfter(err)
		d = max(d, minBusyDelay)
		return d + rand.N(max(d/4, minBusySpread))
	}
}
