package leader_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/fencing/observe"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/leader"
)

// runElector runs e.Run in a goroutine and returns its result.
func runElector(ctx context.Context, e *leader.Elector) <-chan error {
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	return done
}

// waitLeading waits until e leads and returns its token.
func waitLeading(t *testing.T, e *leader.Elector, what string) int64 {
	t.Helper()
	waitFor(t, 10*time.Second, what, func() bool { return e.IsLeader(t.Context()) == nil })
	token, ok := e.Token()
	if !ok {
		t.Fatalf("%s: IsLeader nil, then Token false", what)
	}
	return token
}

// notLeader fails the test unless e reports that it does not lead.
func notLeader(t *testing.T, e *leader.Elector, what string) {
	t.Helper()
	if err := e.IsLeader(t.Context()); !errors.Is(err, leader.ErrNotLeader) {
		t.Fatalf("%s: IsLeader got %v, want an error matching ErrNotLeader", what, err)
	}
	if token, ok := e.Token(); ok {
		t.Fatalf("%s: Token got %d, true; want false", what, token)
	}
}

func TestElectorBadInput(t *testing.T) {
	r := redistest.New(t)
	l := newLocker(t, r)
	closed := newLocker(t, r)
	_ = closed.Close()
	var nilCtx context.Context
	for _, tc := range []struct {
		name    string
		e       *leader.Elector
		ctx     context.Context
		want    error
		invalid bool // IsLeader's error also matches ErrInvalid
	}{
		{"nil locker", leader.New(nil, "leader"), t.Context(), fencing.ErrInvalid, true},
		{"empty name", leader.New(l, ""), t.Context(), fencing.ErrInvalid, true},
		{"nil elector", nil, t.Context(), fencing.ErrInvalid, true},
		{"nil context", leader.New(l, "leader"), nilCtx, fencing.ErrInvalid, false},
		{"oversized name", leader.New(l, strings.Repeat("x", fencing.MaxResourceLen+1)), t.Context(), fencing.ErrInvalid, false},
		{"bad ttl", leader.New(l, "leader", fencing.WithTTL(-time.Second)), t.Context(), fencing.ErrInvalid, false},
		{"closed locker", leader.New(closed, "leader"), t.Context(), fencing.ErrClosed, false},
		{"nil client", leader.New(fencing.New(nil), "leader"), t.Context(), fencing.ErrInvalid, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.e.Run(tc.ctx); !errors.Is(err, tc.want) {
				t.Fatalf("Run: got %v, want an error matching %v", err, tc.want)
			}
			err := tc.e.IsLeader(t.Context())
			if !errors.Is(err, leader.ErrNotLeader) || errors.Is(err, fencing.ErrInvalid) != tc.invalid {
				t.Fatalf("IsLeader: got %v, want ErrNotLeader (and ErrInvalid: %v)", err, tc.invalid)
			}
			if _, ok := tc.e.Token(); ok {
				t.Fatal("Token: got true, want false")
			}
		})
	}
	if n := keysCount(t, r); n != 0 {
		t.Fatalf("got %d keys after bad input, want none", n)
	}
}

// TestElectorLeadsAndResigns runs one Elector: it does not lead before Run, leads with
// epoch 1, refuses a second Run while running, resigns when Run's context ends (the next
// owner gets the next token at once), and leads again when Run is called again.
func TestElectorLeadsAndResigns(t *testing.T) {
	r := redistest.New(t)
	l, other := newLocker(t, r), newLocker(t, r)
	e := leader.New(l, "leader")
	err := e.IsLeader(t.Context())
	if !errors.Is(err, leader.ErrNotLeader) || errors.Is(err, fencing.ErrInvalid) {
		t.Fatalf("IsLeader before Run: got %v, want ErrNotLeader alone", err)
	}
	if want := `leader: elector "leader": not leader: not running: Run was not called, or has returned`; err.Error() != want {
		t.Errorf("IsLeader before Run: got %q, want %q", err, want)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := runElector(ctx, e)
	if token := waitLeading(t, e, "the first term"); token != 1 {
		t.Fatalf("got epoch %d, want 1", token)
	}
	// A done context: not leader, whatever the term, and the error says why.
	gone, stop := context.WithCancel(t.Context())
	stop()
	if err := e.IsLeader(gone); !errors.Is(err, leader.ErrNotLeader) || !errors.Is(err, context.Canceled) {
		t.Fatalf("IsLeader with a cancelled context: got %v, want ErrNotLeader and context.Canceled", err)
	}
	// A second Run while the first runs: refused at once, the first goes on leading.
	if err := e.Run(t.Context()); !errors.Is(err, fencing.ErrInvalid) {
		t.Fatalf("second Run: got %v, want ErrInvalid", err)
	}
	if err := e.IsLeader(t.Context()); err != nil {
		t.Fatalf("IsLeader after a refused second Run: %v", err)
	}

	cancel()
	if err := waitErr(t, done, 5*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: got %v, want context.Canceled", err)
	}
	notLeader(t, e, "after Run returned")
	lock := mustAcquire(t, other, "leader") // resigned: free at once
	if lock.Token() != 2 {
		t.Fatalf("got token %d after the resignation, want 2", lock.Token())
	}
	if err := lock.Release(t.Context()); err != nil {
		t.Fatal(err)
	}

	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	done = runElector(ctx, e)
	if token := waitLeading(t, e, "the term of the second Run"); token != 3 {
		t.Fatalf("got epoch %d, want 3", token)
	}
	cancel()
	if err := waitErr(t, done, 5*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("second Run: got %v, want context.Canceled", err)
	}
}

// TestElectorLostLeadership takes leadership away (another owner, queued, takes the name as
// if the lease had run out; Redis refusing every command past the lease): IsLeader reports the loss,
// and Run campaigns again and leads with a higher epoch.
func TestElectorLostLeadership(t *testing.T) {
	for _, how := range []string{"taken over", "redis down"} {
		t.Run(how, func(t *testing.T) {
			r := redistest.New(t)
			if how == "redis down" && r.Mini == nil {
				t.Skip("needs miniredis's SetError")
			}
			const ttl = 300 * time.Millisecond
			// The Lost hook runs when the renewer gives the lease up, just before it cancels
			// the term: there, only IsLeader's own look at the clock can tell the lease is over.
			var e *leader.Elector
			atLoss := make(chan error, 1)
			hooks := fencing.WithHooks(observe.Hooks{Lost: func(ctx context.Context, ev observe.Event) {
				err := e.IsLeader(context.Background())
				if _, ok := e.Token(); ok && err == nil {
					err = errors.New("Token true")
				}
				select {
				case atLoss <- err:
				default:
				}
			}})
			l := newLocker(t, r, fencing.WithTTL(ttl), fencing.WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond), hooks)
			other := newLocker(t, r)
			e = leader.New(l, "leader")
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := runElector(ctx, e)
			first := waitLeading(t, e, "the first term")
			var intruder int64
			switch how {
			case "taken over":
				// The intruder waits in the queue first, so that the leader, campaigning again
				// once it sees the loss, cannot take the name back before it.
				got := acquireAsync(t.Context(), other, "leader", fencing.WithTTL(ttl))
				waitFor(t, 5*time.Second, "the intruder in the queue", func() bool { return queueLen(r, "leader") == 1 })
				r.Client.Del(t.Context(), r.Prefix+"{leader}:lock")
				a := recv(t, got, 5*time.Second, "the intruder's lock")
				if a.err != nil {
					t.Fatalf("intruder: %v", a.err)
				}
				lock := a.lock
				intruder = lock.Token()
				defer lock.Release(context.Background())
				waitFor(t, 5*time.Second, "IsLeader to report the loss", func() bool {
					return errors.Is(e.IsLeader(t.Context()), leader.ErrNotLeader)
				})
				notLeader(t, e, "while another owner holds the name")
				if err := lock.Release(t.Context()); err != nil {
					t.Fatal(err)
				}
			case "redis down":
				r.Mini.SetError("LOADING Redis is loading the dataset in memory")
				// The lease's local end passes with no renewal: IsLeader says so before the term's
				// context is cancelled.
				err := recv(t, atLoss, 5*time.Second, "the renewer to give the lease up")
				if want := "not leader: the lease ran out by the local clock"; !errors.Is(err, leader.ErrNotLeader) || !strings.Contains(fmt.Sprint(err), want) {
					t.Fatalf("IsLeader as the lease lapsed: got %v, want an error matching ErrNotLeader that says %q", err, want)
				}
				notLeader(t, e, "while Redis is down")
				r.Mini.SetError("")
				r.Mini.FastForward(ttl) // the lease has run out meanwhile
			}
			second := waitLeading(t, e, "the second term")
			if second <= first || second <= intruder {
				t.Fatalf("got epoch %d after %d (and the intruder's %d), want it higher", second, first, intruder)
			}
			cancel()
			if err := waitErr(t, done, 5*time.Second); !errors.Is(err, context.Canceled) {
				t.Fatalf("Run: got %v, want context.Canceled", err)
			}
		})
	}
}

// leaderSpan is what a sampler saw of one term: the calls of IsLeader that returned nil.
type leaderSpan struct {
	who   string
	token int64
	first time.Time // when the first call that returned nil had returned: the term had begun
	last  time.Time // when the last call that returned nil began: the term had not ended
}

// sampler calls IsLeader and Token on one Elector in a loop, and records its terms.
type sampler struct {
	who   string
	e     *leader.Elector
	mu    sync.Mutex
	spans []leaderSpan
}

// run samples until ctx ends.
func (s *sampler) run(ctx context.Context) {
	var cur *leaderSpan
	for ctx.Err() == nil {
		began := time.Now()
		err := s.e.IsLeader(ctx)
		token, ok := s.e.Token()
		ended := time.Now()
		switch {
		case err != nil || !ok:
			cur = nil
		case cur != nil && cur.token == token:
			s.mu.Lock()
			cur.last = began
			s.mu.Unlock()
		default:
			s.mu.Lock()
			s.spans = append(s.spans, leaderSpan{who: s.who, token: token, first: ended, last: began})
			cur = &s.spans[len(s.spans)-1]
			s.mu.Unlock()
		}
		time.Sleep(200 * time.Microsecond) // a scheduler's checks; not needed for the test to pass
	}
}

func (s *sampler) list() []leaderSpan {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.spans)
}

// checkSpans checks terms seen by every sampler: no two overlap for certain (one term's
// first nil came before another's last nil, and the other way round), and in the order they
// began their epochs strictly increase. It returns the spans in that order.
func checkSpans(t *testing.T, spans []leaderSpan) []leaderSpan {
	t.Helper()
	slices.SortFunc(spans, func(a, b leaderSpan) int { return a.first.Compare(b.first) })
	for i, a := range spans {
		for _, b := range spans[i+1:] {
			if b.first.Before(a.last) && a.first.Before(b.last) {
				t.Errorf("%s (epoch %d, leading %v..%v) and %s (epoch %d, leading %v..%v) led at once",
					a.who, a.token, a.first.Format(time.StampMicro), a.last.Format(time.StampMicro),
					b.who, b.token, b.first.Format(time.StampMicro), b.last.Format(time.StampMicro))
			}
		}
		if i > 0 && a.token <= spans[i-1].token {
			t.Errorf("%s's epoch %d follows %s's epoch %d", a.who, a.token, spans[i-1].who, spans[i-1].token)
		}
	}
	return spans
}

// TestElectorThreeCandidates runs three Electors on three Lockers, each sampled in a loop of
// IsLeader and Token, and makes the leader resign four times (its Run's context ends; it runs
// again at once): the next candidate leads each time, no two ever lead at once, and epochs
// strictly increase from term to term.
func TestElectorThreeCandidates(t *testing.T) {
	r := redistest.New(t)
	type candidate struct {
		e      *leader.Elector
		s      *sampler
		cancel context.CancelFunc
		done   <-chan error
	}
	cands := make([]*candidate, 3)
	sctx, stopSampling := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopSampling()
	start := func(c *candidate) {
		ctx, cancel := context.WithCancel(t.Context())
		c.cancel, c.done = cancel, runElector(ctx, c.e)
	}
	for i := range cands {
		// Terms end by resignation here; a long lease keeps a slow renewal on a loaded machine
		// from ending one too.
		e := leader.New(newLocker(t, r, fencing.WithTTL(10*time.Second)), "leader")
		c := &candidate{e: e, s: &sampler{who: fmt.Sprintf("candidate %d", i), e: e}}
		cands[i] = c
		start(c)
		wg.Go(func() { c.s.run(sctx) })
	}
	defer func() {
		for _, c := range cands {
			c.cancel()
			<-c.done
		}
	}()
	// leader waits for a candidate other than other to lead, and for its sampler to see it.
	var epochs []int64
	leader := func(other *candidate) *candidate {
		t.Helper()
		var found *candidate
		var token int64
		waitFor(t, 10*time.Second, "a leader", func() bool {
			for _, c := range cands {
				if tk, ok := c.e.Token(); c != other && ok {
					found, token = c, tk
					return true
				}
			}
			return false
		})
		waitFor(t, 5*time.Second, "the sampler to see the term", func() bool {
			sp := found.s.list()
			return len(sp) > 0 && sp[len(sp)-1].token == token
		})
		epochs = append(epochs, token)
		return found
	}
	lead := leader(nil)
	for range 4 {
		lead.cancel()
		if err := waitErr(t, lead.done, 5*time.Second); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: got %v, want context.Canceled", err)
		}
		notLeader(t, lead.e, "after its Run returned")
		next := leader(lead)
		start(lead) // a candidate again, behind the others
		lead = next
	}
	stopSampling()
	wg.Wait()
	var spans []leaderSpan
	for _, c := range cands {
		spans = append(spans, c.s.list()...)
	}
	spans = checkSpans(t, spans)
	var seen []int64
	for _, sp := range spans {
		seen = append(seen, sp.token)
	}
	if !slices.Equal(seen, epochs) {
		t.Errorf("the samplers saw the terms of epochs %v, want those the test saw: %v", seen, epochs)
	}
}
