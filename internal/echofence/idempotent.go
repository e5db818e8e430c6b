package echofence

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/fencekit/fencekit/fencing"
)

// Serve runs one request under the idempotency middleware: it reads the key, buffers the
// body, takes the fingerprint, and then either replays the key's stored result, runs next
// under the key's lock and stores its result, or builds the error response.
func (m *Idempotency[C]) Serve(c C, next func(c C) error) error {
	if m.skip(c) {
		return next(c)
	}
	req := c.Request()
	key, present, err := idempotencyKey(req.Header, m.header)
	switch {
	case err != nil:
		return m.errorHandler(c, err)
	case !present && m.required:
		return m.errorHandler(c, keyErr("This request needs an "+m.header+" header.", "no %s", m.header))
	case !present:
		return next(c)
	}
	scope := ""
	if m.scope != nil {
		if scope, err = m.scope(c); err != nil {
			return m.errorHandler(c, idemErr(http.StatusBadRequest, "", &ownError{msg: "Scope", cause: err, is: []error{fencing.ErrInvalid}}))
		}
	}
	if err := bufferBody(req, m.maxBody); err != nil {
		return m.errorHandler(c, err)
	}
	fp, err := m.fingerprint(c)
	if err != nil {
		return m.errorHandler(c, idemErr(http.StatusBadRequest, "", &ownError{msg: "Fingerprint", cause: err, is: []error{fencing.ErrInvalid}}))
	}
	name := IdempotencyName(scope, c.Path(), key)
	if err := checkName(name); err != nil {
		return m.errorHandler(c, err)
	}
	return m.serve(c, next, name, fp)
}

// attempt is one run of a request under the key's lock: what the handler answered and
// whether the record went with the release.
type attempt struct {
	ran        bool
	handled    bool  // the handler's error was answered by Echo's error handler, into out
	err        error // the handler's error
	out        *capture
	stored     string // a record found before running (a call that waited)
	committing bool   // the record went with the release (fencing.LeaveMemo)
	committed  bool   // and the release found the lock held: Do returned nil
	lost       bool   // the call lost its lock while the handler ran
	token      int64  // the call's token
}

// serve takes the key's lock and runs next under it, or answers from the stored result.
// The first try is a single attempt with fencing.UnlessMemo: its acquire script reads the
// record first, and a stored result is replayed in that one round trip, without a lock. A
// busy key is answered 409, or with MaxWait waited for in the lock's queue: a call granted
// the lock from the queue was not checked, so it reads the record before it runs.
func (m *Idempotency[C]) serve(c C, next func(c C) error, name, fp string) error {
	req := c.Request()
	begin := time.Now()
	label := RequestLabel(c, m.label, m.glue.Header)
	var a attempt
	err := m.locker.Do(req.Context(), name, func(work context.Context) error {
		return m.run(work, c, next, name, fp, false, &a)
	}, labelled(label, m.try)...)
	var memo *fencing.MemoError
	if errors.Is(err, fencing.ErrNotAcquired) && !errors.As(err, &memo) && m.maxWait > 0 {
		wait := m.maxWait - time.Since(begin)
		err = m.locker.Do(req.Context(), name, func(work context.Context) error {
			return m.run(work, c, next, name, fp, true, &a)
		}, labelled(label, []fencing.CallOption{fencing.WithTTL(m.lockTTL), fencing.WithMaxWait(max(wait, 0)), fencing.WithLimit(1), fencing.UnlessMemo(RecordName)})...)
	}
	a.committed = a.committing && err == nil
	switch {
	case a.stored != "":
		return m.replay(c, a.stored, fp)
	case a.ran:
		return m.finish(c, fp, name, &a)
	case errors.As(err, &memo):
		return m.replay(c, memo.Value, fp)
	case errors.Is(err, fencing.ErrNotAcquired):
		return m.inProgress(c, err)
	case errors.Is(err, fencing.ErrInvalid):
		// The Locker refused its own settings for this call (a lock TTL above its counter
		// expiry, say): the server's fault.
		err = setupErr(err)
	}
	return m.errorHandler(c, err)
}

// errStored ends a run that found a stored result before running the handler.
var errStored = errors.New("stored result found")

// run is the work of Locker.Do: it runs the handler with the token in the request's context
// and its response captured, and leaves the record to write with the release. With probe (the
// lock may come from the queue, whose grant reads no record) it first reads the record.
func (m *Idempotency[C]) run(work context.Context, c C, next func(c C) error, name, fp string, probe bool, a *attempt) error {
	req := c.Request()
	if probe {
		stored, ok, err := m.locker.ReadMemo(work, name, RecordName)
		switch {
		case err != nil:
			return err
		case ok:
			a.stored = stored
			return errStored
		}
	}
	token, _ := fencing.TokenFor(work, name)
	out := newCapture(m.glue.Response(c), m.maxBody)
	a.ran, a.out, a.token = true, out, token
	restore := m.glue.Swap(c, out)
	c.SetRequest(req.WithContext(withRecordHeld(work, name, token)))
	defer func() { // also when next panics: Recover, outside, answers on the client's response
		c.SetRequest(req)
		restore()
	}()
	a.err = next(c)
	if a.err != nil && !out.written() {
		// Echo answers an error after the middlewares return, too late to be captured: the
		// error handler answers it now, into the capture, as Echo's own Timeout middleware
		// does.
		m.glue.HandleError(c, a.err)
		a.handled = true
	}

	// The record is written by the release itself, in the same step, only while the call
	// still holds the key's lock (fencing.LeaveMemo). A call that lost its lock stores
	// nothing, but still reads the result that won, for its client (finish).
	lost := errors.Is(context.Cause(work), fencing.ErrNotHeld)
	status := out.code()
	switch {
	case out.streamed, !lost && (!m.keep(status) || errors.Is(a.err, fencing.ErrNotAcquired)):
		// Not kept: streamed, a 5xx by default, or a busy lock inside (the Fence middleware's
		// 423): the request did nothing a retry should not do again.
	case lost:
		a.lost = true
	default:
		rec := &record{token: token, status: status, fingerprint: fp, body: out.body.Bytes()}
		for _, h := range m.replayHeaders {
			if values := out.header[h]; len(values) > 0 {
				if rec.header == nil {
					rec.header = http.Header{}
				}
				rec.header[h] = values
			}
		}
		// With tokens floored at the server clock, a counter created again starts above
		// every token before it, so the key's counter expires with its record.
		memo := fencing.Memo{Name: RecordName, Value: string(rec.encode()), TTL: m.retention, ExpireCounter: m.floored}
		if err := fencing.LeaveMemo(work, memo); err != nil {
			return err
		}
		a.committing = true
	}
	return nil
}

// finish answers a request whose handler ran, from the commit's reply: the handler's
// response when it is the stored one (or none was to be stored, or the commit's outcome is
// unknown), the result that won when another call committed first, and 409 when another
// call holds the key and has not committed yet.
func (m *Idempotency[C]) finish(c C, fp, name string, a *attempt) error {
	result := a.err
	if a.handled {
		result = nil // answered already, by Echo's error handler
	}
	if a.out.streamed {
		return result
	}
	if (a.committing && !a.committed) || a.lost {
		// The release found the lock lost: nothing was written. Read what won.
		reply, err := wonFor(context.WithoutCancel(c.Request().Context()), m.locker, name, a.token)
		switch {
		case err != nil, reply.mine, reply.free:
			// Stored, nothing to store, or not known: the handler's answer is the truth.
		case reply.stored != "":
			return m.replay(c, reply.stored, fp)
		default:
			return m.inProgress(c, &ownError{msg: "a later request holds the key", is: []error{fencing.ErrNotAcquired}})
		}
	}
	a.out.send(m.glue.Response(c))
	return result
}

// replay answers with a stored result, byte for byte, marked Idempotent-Replayed, or 422
// when it is another request's.
func (m *Idempotency[C]) replay(c C, stored, fp string) error {
	rec, err := decodeRecord(stored)
	if err != nil {
		return m.errorHandler(c, idemErr(http.StatusInternalServerError, "", &ownError{msg: "stored result", cause: err, is: []error{errCorrupt}}))
	}
	if rec.fingerprint != fp {
		return m.errorHandler(c, idemErr(http.StatusUnprocessableEntity,
			"This "+m.header+" was used with another request (method, route, path values or body).", ErrKeyReused))
	}
	w := m.glue.Response(c)
	h := w.Header()
	for _, name := range m.replayHeaders {
		h.Del(name)
	}
	h.Del("Content-Length")
	for name, values := range rec.header {
		h[name] = values
	}
	h.Set(HeaderIdempotentReplayed, "true")
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body)
	return nil
}

// inProgress answers 409 with Retry-After: another request with the key holds its lock.
func (m *Idempotency[C]) inProgress(c C, err error) error {
	m.glue.Header(c).Set(HeaderRetryAfter, strconv.Itoa(inProgressRetryAfter))
	return m.errorHandler(c, idemErr(http.StatusConflict,
		"A request with this "+m.header+" is being processed; retry later.", err))
}

// inProgressRetryAfter is the Retry-After, in seconds, of a 409: a request that holds a key
// is usually done well within a second, and a retry that finds it done costs one round
// trip. (The holder's remaining lease, which the Fence middleware sends, is renewed while
// the request runs and says nothing of when it ends.)
const inProgressRetryAfter = 1
