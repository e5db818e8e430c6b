package errorstest

import (
	"testing"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
	"github.com/fencekit/fencekit/servercheck"
)

func servercheckCases() []errCase {
	return []errCase{
		{"servercheck.Check/ErrUnsafe", "servercheck: ", []error{servercheck.ErrUnsafe}, func(t *testing.T) error {
			// A server of the case's own that may evict a fence counter.
			redisproc.Require(t)
			s := redisproc.Start(t, redisproc.Args("--maxmemory-policy", "allkeys-lru"))
			l := fencing.New(s.Client(t))
			defer l.Close()
			_, err := servercheck.Check(t.Context(), l)
			return err
		}},
		{"servercheck.Check/unreadable", "servercheck: ", nil, func(t *testing.T) error {
			e := newEnv(t)
			if e.r.Mini == nil {
				t.Skip("a real Redis answers CONFIG GET: only miniredis cannot be read")
			}
			_, err := servercheck.Check(t.Context(), e.locker)
			return err
		}},
		{"servercheck.Check/ErrInvalid", core, []error{fencing.ErrInvalid}, func(t *testing.T) error {
			_, err := servercheck.Check(t.Context(), newEnv(t, fencing.WithLimit(0)).locker)
			return err
		}},
	}
}

func TestServercheck(t *testing.T) {
	t.Parallel()
	run(t, servercheckCases())
}
