package fencing

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/seam"
)

// releaseTimeout bounds releases made with a fresh context.
const releaseTimeout = 5 * time.Second

// release runs release.lua for lock values of one acquisition of mode m: values[i] on the
// resource of ks[i], or "<owner>:" for whatever token that owner holds. One script takes the
// resources that one script can (see groups), and the scripts go in one pipeline. It reports
// for each value whether it held its resource, or the error. Grants to this Locker's own
// waiters, which the script returns instead of announcing, are delivered to them.
func (l *Locker) release(ctx context.Context, ks []keys, values []string, m mode) ([]bool, []error) {
	held, errs := make([]bool, len(ks)), make([]error, len(ks))
	if len(ks) == 0 {
		return held, errs
	}
	runs := l.groupKeys(ks)
	calls := make([]scriptCall, len(runs))
	for j, run := range runs {
		c := scriptCall{keys: make([]string, 0, 3*len(run)), args: make([]any, 0, len(run)+3)}
		self := ""
		for _, i := range run {
			c.keys = append(c.keys, ks[i].lock, ks[i].fence, ks[i].queue)
			c.args = append(c.args, values[i])
			if l.waits.queuedOn(ks[i].channel) {
				self = l.waits.id
			}
		}
		c.args = releaseArgs(c.args, l.topo.Publish(), m, self)
		calls[j] = c
	}
	sent := time.Now()
	cmds := l.pipeScripts(ctx, releaseScript, calls)
	resend(ctx, cmds, func(which []scriptCall) []*redis.Cmd { return l.pipeScripts(ctx, releaseScript, which) }, calls)
	for j, cmd := range cmds {
		res, err := cmd.Result()
		run := runs[j]
		if err == nil && len(run) > 1 {
			arr, _ := res.([]any)
			if len(arr) != len(run) {
				err = fmt.Errorf("unexpected reply %v", res)
			}
			for n, i := range run {
				if err != nil {
					errs[i] = err
					continue
				}
				held[i], errs[i] = l.released(ks[i], sent, values[i], m, arr[n])
			}
			continue
		}
		if err != nil {
			for _, i := range run {
				errs[i] = err
			}
			continue
		}
		i := run[0]
		held[i], errs[i] = l.released(ks[i], sent, values[i], m, res)
	}
	return held, errs
}

// releaseOne is release of one value, with no slice but the arguments', and with what call
// commits with it (see seam.Call; nil: nothing).
func (l *Locker) releaseOne(ctx context.Context, k keys, value string, m mode, call *seam.Call) (bool, error) {
	self := ""
	if l.waits.queuedOn(k.channel) {
		self = l.waits.id
	}
	sent := time.Now()
	var res any
	var err error
	if call != nil && call.GuardKey != "" && (call.Commit != "" || call.CounterTTL > 0) {
		args := []any{value, l.topo.Publish(), m.arg(), self, call.Commit, max(call.CommitTTL.Milliseconds(), 1), call.CounterTTL.Milliseconds()}
		ks := []string{k.lock, k.fence, k.queue, call.GuardKey}
		res, err = releaseScript.run(ctx, l.client, ks, args...).Result()
		if lostReply(ctx, err) {
			res, err = releaseScript.run(ctx, l.client, ks, args...).Result()
		}
		defer func() { call.Committed = err == nil && res != int64(flagNotHeld) }()
	} else {
		args := releaseArgs([]any{value}, l.topo.Publish(), m, self)
		res, err = releaseScript.runOn(ctx, l.client, k, args...).Result()
		if lostReply(ctx, err) {
			res, err = releaseScript.runOn(ctx, l.client, k, args...).Result()
		}
	}
	if err != nil {
		return false, err
	}
	return l.released(k, sent, value, m, res)
}

// lostReply reports whether err leaves it unknown whether a release ran: the connection
// failed, the context still lasts. The release is sent once more, on another connection: its
// release record answers it as the first run went (a release is idempotent), whatever
// retries the client makes of its own.
func lostReply(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	var reply redis.Error
	return !errors.As(err, &reply)
}

// resend sends again, with send, the calls whose replies were lost (see lostReply), and puts
// their new commands in cmds.
func resend(ctx context.Context, cmds []*redis.Cmd, send func([]scriptCall) []*redis.Cmd, calls []scriptCall) {
	var lost []int
	for i, cmd := range cmds {
		if lostReply(ctx, cmd.Err()) {
			lost = append(lost, i)
		}
	}
	if len(lost) == 0 {
		return
	}
	again := make([]scriptCall, len(lost))
	for n, i := range lost {
		again[n] = calls[i]
	}
	for n, cmd := range send(again) {
		cmds[lost[n]] = cmd
	}
}

// releaseArgs appends to the values release.lua's other arguments, leaving out those with
// their defaults: publish, kind and self.
func releaseArgs(args []any, publish string, m mode, self string) []any {
	switch {
	case self != "":
		return append(args, publish, m.arg(), self)
	case !m.exclusive():
		return append(args, publish, m.arg())
	case publish != "P":
		return append(args, publish)
	}
	return args
}

// released decodes release.lua's reply for one value released at sent, and delivers the grants
// to this Locker's own waiters in it. It reports whether value held the resource.
func (l *Locker) released(k keys, sent time.Time, value string, m mode, res any) (bool, error) {
	var grants []grantReply
	switch r := res.(type) {
	case int64:
		switch r {
		case flagNotHeld:
			return false, nil
		case flagReleased:
		default:
			return false, fmt.Errorf("unexpected reply %v", res)
		}
	case []any:
		if len(r) < 1 || r[0] != int64(flagGranted) {
			return false, fmt.Errorf("unexpected reply %v", res)
		}
		var err error
		if grants, err = grantPairs(r, 2); err != nil {
			return true, err
		}
	default:
		return false, fmt.Errorf("unexpected reply %v", res)
	}
	if !m.exclusive() {
		// Other holders may have tokens above this one: the release dates no grant but its
		// own (see waiting.saw).
		value = ""
	}
	l.waits.saw(k, sent, value)
	for _, g := range grants {
		l.waits.granted(k, g.elem, g.token, sent)
	}
	if len(grants) > 0 {
		// The grant went to a waiter of this Locker, now runnable: let it run before this
		// goroutine goes on, which would otherwise delay the next holder's start by its own
		// work until it blocks (docs/benchmarks.md, "The hand-off's own floor").
		runtime.Gosched()
	}
	return true, nil
}

// groupKeys splits the indices of ks, in order, into the runs that one script can take: all
// of them on one server, those of one slot on a Cluster, one each on a Ring.
func (l *Locker) groupKeys(ks []keys) [][]int {
	var runs [][]int
	if !l.topo.OneScript() {
		for i := range ks {
			runs = append(runs, []int{i})
		}
		return runs
	}
	bySlot := map[uint16]int{}
	for i, k := range ks {
		s := l.topo.Slot(k.lock)
		j, ok := bySlot[s]
		if !ok {
			j = len(runs)
			bySlot[s] = j
			runs = append(runs, nil)
		}
		runs[j] = append(runs[j], i)
	}
	return runs
}

// passOn releases a grant to this Locker's waiter of mode m that no waiter takes, which
// grants it to the next waiters. Errors are ignored: the lease then runs out by itself.
func (l *Locker) passOn(k keys, value string, m mode) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	_, _ = l.releaseOne(ctx, k, value, m, nil)
}
