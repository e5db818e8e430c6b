package scan

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/wire"
)

// Inspectors bounds how many Inspect calls Inspect has in flight at once.
const Inspectors = 16

// LockPattern returns the SCAN pattern of the lock keys under prefix: the keys that start
// with the prefix and a hash tag and end as package wire names a lock key. Names tells
// which of them are lock keys.
func LockPattern(prefix string) string {
	k := wire.For("", "r")
	return EscapeGlob(prefix) + "{*" + EscapeGlob(strings.TrimPrefix(k.Lock, k.Base()))
}

// Names returns the resources whose lock keys under prefix are among keys and whose names
// match the glob match (Match), in the order of keys. Other keys are left out.
func Names(prefix, match string, keys []string) []string {
	var names []string
	for _, key := range keys {
		if name, ok := wire.ResourceOf(prefix, key); ok && Match(match, name) {
			names = append(names, name)
		}
	}
	return names
}

// Inspect reads each resource of names with locker.Inspect, up to Inspectors at once, and
// returns each one's Status or error, by index.
func Inspect(ctx context.Context, locker *fencing.Locker, names []string) ([]*fencing.Status, []error) {
	statuses := make([]*fencing.Status, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, Inspectors)
	var wg sync.WaitGroup
	for i, name := range names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			statuses[i], errs[i] = locker.Inspect(ctx, name)
		})
	}
	wg.Wait()
	return statuses, errs
}

// OneResource reports whether err, an error of Inspect, concerns its resource alone, so that
// a listing leaves the resource out and goes on: a reply from Redis about that resource's
// keys (a key of an unexpected type, WRONGTYPE) or a name the Locker refuses
// (fencing.ErrInvalid). Other errors (a connection, a context) end a listing.
func OneResource(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) || errors.Is(err, fencing.ErrInvalid)
}

// Empty reports whether st has neither a holder nor a waiter: a lock released since the
// scan found its key, or a shared or limited lock's hash that outlives its last holder. A
// listing leaves it out.
func Empty(st *fencing.Status) bool {
	return len(st.Holders) == 0 && len(st.Waiters) == 0
}
