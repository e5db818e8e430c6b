package asynqfence_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fencekit/fencekit/asynqfence"
	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// TestZeroValues calls every method of the package's exported types on a zero value and a nil
// pointer, and the constructors with the zero values of their argument types (a nil Option,
// ResourceFunc, ResourcesFunc, handler or task, zero SchedulerHooks): each either works or
// returns an error matching fencing.ErrInvalid, and none panics. The package's other exported
// types (Option, SchedulerOption, ResourceFunc, ResourcesFunc, SchedulerHooks, EnqueueEvent)
// have no exported methods.
func TestZeroValues(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	l := newLocker(t, r)
	client := asynq.NewClientFromRedisClient(r.Client)
	t.Cleanup(func() { _ = client.Close() })
	task := asynq.NewTask("job", []byte("acct"))
	ok := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })
	var zero asynqfence.Scheduler
	var nilScheduler *asynqfence.Scheduler
	unmade := asynqfence.NewScheduler(nil, nil, "", nil, asynqfence.WithSchedulerHooks(asynqfence.SchedulerHooks{}))
	made := asynqfence.NewScheduler(client, l, "zero")
	done, cancel := context.WithCancel(t.Context())
	cancel()
	tick := time.Unix(1700000000, 0)

	for _, tc := range []struct {
		name string
		call func() error
		// want is nil when the call works, and fencing.ErrInvalid otherwise.
		want error
	}{
		{"zero Scheduler: Register", func() error { _, err := zero.Register("@every 1s", task); return err }, fencing.ErrInvalid},
		{"zero Scheduler: Unregister", func() error { return zero.Unregister("x") }, fencing.ErrInvalid},
		{"zero Scheduler: Run", func() error { return zero.Run(done) }, fencing.ErrInvalid},
		{"zero Scheduler: TaskID", func() error {
			return wantString(zero.TaskID("e", tick), "asynqfence::e:1700000000")
		}, nil},
		{"nil *Scheduler: Register", func() error { _, err := nilScheduler.Register("@every 1s", task); return err }, fencing.ErrInvalid},
		{"nil *Scheduler: Unregister", func() error { return nilScheduler.Unregister("x") }, fencing.ErrInvalid},
		{"nil *Scheduler: Run", func() error { return nilScheduler.Run(done) }, fencing.ErrInvalid},
		{"nil *Scheduler: TaskID", func() error {
			return wantString(nilScheduler.TaskID("e", tick), "asynqfence::e:1700000000")
		}, nil},
		{"NewScheduler of zero arguments: Register", func() error { _, err := unmade.Register("@every 1s", task); return err }, nil},
		{"NewScheduler of zero arguments: Register(nil task)", func() error { _, err := unmade.Register("@every 1s", nil); return err }, fencing.ErrInvalid},
		{"NewScheduler of zero arguments: Unregister", func() error { return unmade.Unregister("") }, fencing.ErrInvalid},
		{"NewScheduler of zero arguments: Run", func() error { return unmade.Run(done) }, fencing.ErrInvalid},
		{"Run(nil context)", func() error { return made.Run(nil) }, fencing.ErrInvalid}, //nolint:staticcheck // the nil context is the test
		{"Wrap(nil handler)", func() error { return asynqfence.Wrap(nil, l, byPayload).ProcessTask(t.Context(), task) }, fencing.ErrInvalid},
		{"Wrap(nil Locker)", func() error { return asynqfence.Wrap(ok, nil, byPayload).ProcessTask(t.Context(), task) }, fencing.ErrInvalid},
		{"Wrap(nil ResourceFunc)", func() error { return asynqfence.Wrap(ok, l, nil).ProcessTask(t.Context(), task) }, fencing.ErrInvalid},
		{"Wrap: nil task", func() error { return asynqfence.Wrap(ok, l, byPayload).ProcessTask(t.Context(), nil) }, fencing.ErrInvalid},
		{"Wrap: nil Option", func() error { return asynqfence.Wrap(ok, l, byPayload, nil).ProcessTask(t.Context(), task) }, nil},
		{"Middleware(nil Locker, nil ResourceFunc, nil Option)", func() error {
			return asynqfence.Middleware(nil, nil, nil)(ok).ProcessTask(t.Context(), task)
		}, fencing.ErrInvalid},
		{"MiddlewareAll(nil ResourcesFunc)", func() error {
			return asynqfence.MiddlewareAll(l, nil)(ok).ProcessTask(t.Context(), task)
		}, fencing.ErrInvalid},
		{"MiddlewareAll: nil task", func() error {
			return asynqfence.MiddlewareAll(l, func(*asynq.Task) ([]string, error) { return nil, nil })(ok).ProcessTask(t.Context(), nil)
		}, fencing.ErrInvalid},
		{"TickOf(nil)", func() error {
			if _, ok := asynqfence.TickOf(nil); ok {
				return errors.New("TickOf(nil) reported a tick")
			}
			return nil
		}, nil},
		{"ServerConfig of the zero Config: its ErrorHandler", func() error {
			asynqfence.ServerConfig(asynq.Config{}).ErrorHandler.HandleError(t.Context(), task, errors.New("x"))
			return nil
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := func() (err error) {
				defer func() {
					if p := recover(); p != nil {
						err = fmt.Errorf("panic: %v", p)
						t.Errorf("panicked: %v", p)
					}
				}()
				return tc.call()
			}()
			switch {
			case tc.want == nil && err != nil:
				t.Errorf("got %v, want it to work", err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Errorf("got %v, want an error matching %v", err, tc.want)
			}
		})
	}
}

// wantString returns an error unless got is want.
func wantString(got, want string) error {
	if got != want {
		return fmt.Errorf("got %q, want %q", got, want)
	}
	return nil
}
