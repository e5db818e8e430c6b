package asynqfence

import (
	"context"
	"time"

	"github.com/hibiken/asynq"
)

// ServerConfig returns cfg with the settings an [asynq.Server] needs to run tasks through
// [Middleware] or [Wrap], chained in front of the ones cfg already has, so it is the one
// call to make besides mux.Use:
//
//   - IsFailure becomes [IsFailure](cfg.IsFailure): a busy attempt is no failure, and keeps
//     the task's retry budget and the queue's statistics untouched;
//   - RetryDelayFunc becomes [RetryDelay](cfg.RetryDelayFunc): a busy task comes back after
//     about the holder's remaining lease, spread over whole seconds;
//   - ErrorHandler drops busy errors ([IsBusy]), which Asynq reports too, and passes every
//     other error to cfg.ErrorHandler (none when it is nil);
//   - DelayedTaskCheckInterval, when zero, becomes 1s instead of Asynq's 5s: busy tasks come
//     back from the retry set in the second they are due, one Redis script per queue each
//     second. A value you set is kept.
//
// Every other field is returned as it is. For example:
//
//	srv := asynq.NewServer(redisOpt, asynqfence.ServerConfig(asynq.Config{
//		Concurrency:  10,
//		ErrorHandler: asynq.ErrorHandlerFunc(report),
//	}))
func ServerConfig(cfg asynq.Config) asynq.Config {
	cfg.IsFailure = IsFailure(cfg.IsFailure)
	cfg.RetryDelayFunc = RetryDelay(cfg.RetryDelayFunc)
	cfg.ErrorHandler = busyFilter{next: cfg.ErrorHandler}
	if cfg.DelayedTaskCheckInterval == 0 {
		cfg.DelayedTaskCheckInterval = delayedTaskCheckInterval
	}
	return cfg
}

// delayedTaskCheckInterval is ServerConfig's default for
// asynq.Config.DelayedTaskCheckInterval: Asynq keeps retry times in whole seconds.
const delayedTaskCheckInterval = time.Second

// busyFilter is an [asynq.ErrorHandler] that drops busy errors and passes the others on.
type busyFilter struct{ next asynq.ErrorHandler }

func (f busyFilter) HandleError(ctx context.Context, t *asynq.Task, err error) {
	if IsBusy(err) || f.next == nil {
		return
	}
	f.next.HandleError(ctx, t, err)
}
