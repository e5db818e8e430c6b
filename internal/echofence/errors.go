package echofence

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
)

// Prefix starts the text of every error the adapters make themselves. The errors of the
// Locker they return as they are, starting "fencing: " (see ownError).
const Prefix = "fencemw: "

// An ownError is an error the adapters make themselves: its text is Prefix and what it says,
// once, followed by the text of cause when there is one (an error of a function of the
// user's, such as a KeyExtractor, or of reading a body; never one of another fencekit
// package). It matches cause and each error of is (fencing.ErrInvalid, errSetup, ...), whose
// texts it does not repeat.
type ownError struct {
	msg   string
	cause error
	is    []error
}

func (e *ownError) Error() string {
	if e.cause == nil {
		return Prefix + e.msg
	}
	return Prefix + e.msg + ": " + e.cause.Error()
}

// Unwrap returns cause and the errors of is, for errors.Is and errors.As.
func (e *ownError) Unwrap() []error {
	if e.cause == nil {
		return e.is
	}
	return append([]error{e.cause}, e.is...)
}

// setupErr returns err, an error of the Locker's refusing a call's options, joined with
// errSetup: its text is the Locker's, as it is, then errSetup's.
func setupErr(err error) error {
	return fmt.Errorf("%w: %w", err, errSetup)
}

// DenyStatus is the status of the default answer to a busy resource: 423 Locked.
const DenyStatus = http.StatusLocked

// DenyMessage is the message of the default answer to a busy resource: "<resource> is busy",
// with the resource named as the middleware locks it ("order:42", or "/orders/:id 42" for a
// route's default name): what the client asked for, in the words of the routes, and never
// the lock's Redis key, its prefix, its holder or its token.
func DenyMessage(resource string) string { return resource + " is busy" }

// errSetup marks an error of the Locker's settings found only when a request called it: the
// Locker refused the call's options (a TTL above its counter expiry, say).
var errSetup = errors.New("options refused by the Locker")

// ErrorStatus is the status of the default answer to an error passed to the ErrorHandler: 500
// Internal Server Error when the Locker refused the call's options (the error also matches
// fencing.ErrInvalid), 400 Bad Request when err matches fencing.ErrInvalid otherwise (the
// request has no valid key, or its name is too long), and 503 Service Unavailable for the
// rest (Redis unreachable, Locker closed).
func ErrorStatus(err error) int {
	switch {
	case errors.Is(err, errSetup):
		return http.StatusInternalServerError
	case errors.Is(err, fencing.ErrInvalid):
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}

// RetryAfter returns the Retry-After value for a busy error: the holder's remaining lease in
// whole seconds, rounded up, and at least 1.
func RetryAfter(err error) string {
	d, _ := fencing.RetryAfter(err)
	secs := int64((d + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(secs, 1), 10)
}

// callOptions checks the Locker, the TTL, MaxWait and Limit and returns the options of every
// Locker.Do call.
func callOptions(l *fencing.Locker, ttl, maxWait time.Duration, limit int) ([]fencing.CallOption, error) {
	if l == nil {
		return nil, invalidf("nil Locker")
	}
	var opts []fencing.CallOption
	if ttl != 0 {
		if ttl < fencing.MinTTL || ttl > fencing.MaxTTL {
			return nil, invalidf("TTL %v out of range [%v, %v]", ttl, fencing.MinTTL, fencing.MaxTTL)
		}
		opts = append(opts, fencing.WithTTL(ttl))
	}
	if maxWait < 0 {
		return nil, invalidf("negative MaxWait %v", maxWait)
	}
	opts = append(opts, fencing.WithMaxWait(maxWait))
	if limit < 0 || limit > fencing.MaxLimit {
		return nil, invalidf("Limit %d out of range [0, %d]", limit, fencing.MaxLimit)
	}
	opts = append(opts, fencing.WithLimit(max(limit, 1))) // 0 means 1, whatever the Locker's

	if err := probe(l, opts); err != nil {
		return nil, err
	}
	return opts, nil
}

// probe reports an unusable Locker or call options without talking to Redis and without a
// call the Locker's hooks would observe: Locker.Err, then the options on a Locker of their own
// (New only applies them; the client it is given never connects).
func probe(l *fencing.Locker, opts []fencing.CallOption) error {
	err := l.Err()
	if err == nil && len(opts) > 0 {
		c := redis.NewClient(&redis.Options{})
		defer c.Close()
		lockerOpts := make([]fencing.Option, len(opts))
		for i, o := range opts {
			lockerOpts[i] = o
		}
		check := fencing.New(c, lockerOpts...)
		defer check.Close()
		err = check.Err()
	}
	// The error is the adapters' own (a Config they refuse), so its text does not carry the
	// Locker's; it matches it, and Locker.Err says why.
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fencing.ErrClosed):
		return &ownError{msg: "Locker closed", is: []error{err}}
	case l.Err() != nil:
		return &ownError{msg: "Locker built with options that can never work (see its Err)", is: []error{err}}
	}
	return &ownError{msg: "TTL, MaxWait or Limit refused by the Locker", is: []error{err}}
}

// invalidf returns an error reading "fencemw: <message>" that matches fencing.ErrInvalid.
func invalidf(format string, args ...any) error {
	return &ownError{msg: fmt.Sprintf(format, args...), is: []error{fencing.ErrInvalid}}
}
