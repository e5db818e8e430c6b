package fencing

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing/internal/room"
	"github.com/fencekit/fencekit/internal/wire"
)

// releaseTimeout bounds releases made with a fresh context.
const releaseTimeout = 5 * time.Second

// release runs the release script for lock values of one acquisition of mode m: values[i] on
// the resource of ks[i], or "<owner>:" for whatever token that owner holds; keep when a
// lease has less than wire.RecordTTL left (see the script). One script takes
// the resources that one script can (see groupKeys), and the scripts go in one pipeline. It
// reports for each value whether it held its resource, or the error. Grants to this Locker's
// own waiters, which the script returns instead of announcing, are delivered to them.
func (l *Locker) release(ctx context.Context, ks []wire.Keys, values []string, m mode, keep bool) ([]bool, []error) {
	held, errs := make([]bool, len(ks)), make([]error, len(ks))
	if len(ks) == 0 {
		return held, errs
	}
	runs := l.groupKeys(ks)
	calls := make([]wire.Call, len(runs))
	for j, run := range runs {
		c := wire.Call{Args: make([]any, 0, len(run)+4)}
		self := ""
		members := make([]wire.Keys, len(run))
		for x, i := range run {
			members[x] = ks[i]
			c.Args = append(c.Args, values[i])
			if l.room.QueuedOn(ks[i]) {
				self = l.room.ID()
			}
		}
		c.Keys = wire.Declare(l.client, members, "")
		c.Args = releaseArgs(c.Args, m, l.topo.Publish(), self, keep)
		calls[j] = c
	}
	sent := time.Now()
	cmds := wire.Release.Pipe(ctx, l.client, calls)
	resend(ctx, cmds, func(which []wire.Call) []*redis.Cmd { return wire.Release.Pipe(ctx, l.client, which) }, calls)
	for j, cmd := range cmds {
		res, err := cmd.Result()
		run := runs[j]
		if err != nil {
			for _, i := range run {
				errs[i] = err
			}
			continue
		}
		if len(run) == 1 {
			i := run[0]
			held[i], errs[i] = l.released(ks[i], sent, values[i], m, res)
			continue
		}
		arr, _ := res.([]any)
		for n, i := range run {
			if len(arr) != len(run) {
				errs[i] = fmt.Errorf("unexpected reply %v", res)
				continue
			}
			held[i], errs[i] = l.released(ks[i], sent, values[i], m, arr[n])
		}
	}
	return held, errs
}

// releaseOne is release of one value, without a slice but the arguments', and with a memo
// written in the same step (nil: none).
func (l *Locker) releaseOne(ctx context.Context, k wire.Keys, value string, m mode, keep bool, memo *Memo) (bool, error) {
	self := ""
	if l.room.QueuedOn(k) {
		self = l.room.ID()
	}
	args := []any{value}
	if memo == nil {
		args = releaseArgs(args, m, l.topo.Publish(), self, keep)
	} else {
		counter := "0"
		if memo.ExpireCounter {
			counter = strconv.FormatInt(millis(memo.TTL), 10)
		}
		args = append(args, releaseKind(m, keep), l.topo.Publish(), self, memo.Name, memo.Value, millis(memo.TTL), counter)
	}
	name := ""
	if memo != nil {
		name = memo.Name
	}
	sent := time.Now()
	res, err := wire.Release.RunOn(ctx, l.client, k, name, args...).Result()
	if room.LostReply(ctx, err) {
		// The release is sent once more, on another connection: its release record answers
		// it as the first run went, whatever retries the client makes of its own.
		res, err = wire.Release.RunOn(ctx, l.client, k, name, args...).Result()
	}
	if err != nil {
		return false, err
	}
	return l.released(k, sent, value, m, res)
}

// resend sends again, with send, the calls whose replies were lost (see room.LostReply), and
// puts their new commands in cmds.
func resend(ctx context.Context, cmds []*redis.Cmd, send func([]wire.Call) []*redis.Cmd, calls []wire.Call) {
	var lost []int
	for i, cmd := range cmds {
		if room.LostReply(ctx, cmd.Err()) {
			lost = append(lost, i)
		}
	}
	if len(lost) == 0 {
		return
	}
	again := make([]wire.Call, len(lost))
	for n, i := range lost {
		again[n] = calls[i]
	}
	for n, cmd := range send(again) {
		cmds[lost[n]] = cmd
	}
}

// releaseArgs appends to the values the release script's other arguments, leaving out those
// with their defaults at the end: kind, publish, self, keep.
func releaseArgs(args []any, m mode, publish, self string, keep bool) []any {
	kind := releaseKind(m, keep)
	switch {
	case self != "":
		return append(args, kind, publish, self)
	case publish != "P":
		return append(args, kind, publish)
	case kind != "x":
		return append(args, kind)
	}
	return args
}

// releaseKind returns the release script's kind argument: m's, or 'k' for an exclusive lock
// whose record must be kept wire.RecordTTL (keep).
func releaseKind(m mode, keep bool) string {
	if keep && m.Exclusive() {
		return "k"
	}
	return m.Arg()
}

// released decodes the release script's reply for one value released at sent, and delivers
// the grants to this Locker's own waiters in it. It reports whether value held the resource.
func (l *Locker) released(k wire.Keys, sent time.Time, value string, m mode, res any) (bool, error) {
	code, grants, err := wire.ParseRelease(res)
	switch {
	case err != nil:
		return false, err
	case code == wire.NotHeld:
		return false, nil
	case code == wire.Layout:
		return false, room.ErrLayout
	}
	if !m.Exclusive() {
		// Other holders may have tokens above this one: the release dates no grant but its
		// own.
		value = ""
	}
	l.room.Saw(k, sent, value)
	for _, g := range grants {
		l.room.Granted(k, g.Element, g.Token, sent)
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
func (l *Locker) groupKeys(ks []wire.Keys) [][]int {
	var runs [][]int
	if !l.topo.OneScript() {
		for i := range ks {
			runs = append(runs, []int{i})
		}
		return runs
	}
	bySlot := map[uint16]int{}
	for i, k := range ks {
		s := l.topo.Slot(k.Lock)
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
