package asynqfence

import (
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/fencing"
)

// minBusyDelay is the shortest busy retry delay: Asynq stores retry times in whole seconds.
const minBusyDelay = time.Second

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
// ([IsBusy]) back after the holder's remaining lease ([fencing.RetryAfter]) plus up to a
// quarter of it as jitter, and at least 1s (Asynq counts retry times in whole seconds, and
// moves due tasks every Config.DelayedTaskCheckInterval, 5s by default). Other errors go to
// next; a nil next stands for [asynq.DefaultRetryDelayFunc].
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
		return d + rand.N(d/4+1)
	}
}
