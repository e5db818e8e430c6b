package wire

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// An AcquireReply is the acquire script's reply.
type AcquireReply struct {
	Code   int64
	Token  int64  // Taken
	Behind int64  // Taken: microseconds the server clock was behind the last token
	Left   int64  // Busy, Queued: milliseconds until the holders let the resource change hands; Queued: -1 when not said
	Held   string // Queued: the exclusive holder's lock value, or ""; Mismatch: the holders' kind; Memoed: the memo
}

// ParseAcquire reads the acquire script's reply: the token alone when taken, or an array led
// by a code.
func ParseAcquire(res any) (AcquireReply, error) {
	if s, ok := res.(string); ok {
		token, err := ParseToken(s)
		return AcquireReply{Code: Taken, Token: token}, err
	}
	arr, _ := res.([]any)
	if len(arr) < 1 {
		return AcquireReply{}, unexpected(res)
	}
	a := AcquireReply{}
	a.Code, _ = arr[0].(int64)
	switch {
	case a.Code == Layout:
	case len(arr) < 2:
		return AcquireReply{}, unexpected(res)
	case a.Code == Busy:
		a.Left, _ = arr[1].(int64)
	case a.Code == Queued:
		a.Held, _ = arr[1].(string)
		a.Left = -1 // unknown: the caller read an exclusive holder's lease before
		if len(arr) > 2 {
			a.Left, _ = arr[2].(int64)
		}
	case a.Code == Mismatch, a.Code == Memoed:
		a.Held, _ = arr[1].(string)
	case a.Code == Taken:
		token, err := ParseToken(arr[1])
		if err != nil {
			return AcquireReply{}, err
		}
		a.Token = token
		if len(arr) > 2 {
			a.Behind, _ = arr[2].(int64)
		}
	default:
		return AcquireReply{}, unexpected(res)
	}
	return a, nil
}

// A SetReply is the acquire script's reply for several resources (acquireall.lua).
type SetReply struct {
	Code   int64   // Taken, Busy, Mismatch or Layout
	Behind int64   // Taken
	Left   int64   // Busy: of the first resource not taken
	Kind   string  // Mismatch: its holders' kind
	Tokens []int64 // of the resources taken, in order
}

// ParseSet reads acquireall.lua's reply for n resources.
func ParseSet(res any, n int) (SetReply, error) {
	arr, _ := res.([]any)
	if len(arr) < 2 {
		return SetReply{}, unexpected(res)
	}
	var r SetReply
	r.Code, _ = arr[0].(int64)
	var raw []any
	switch r.Code {
	case Taken:
		r.Behind, _ = arr[1].(int64)
		raw = arr[2:]
		if len(raw) != n {
			return SetReply{}, errors.New("unexpected reply: wrong number of tokens")
		}
	case Busy, Mismatch, Layout:
		if len(arr) < 3 {
			return SetReply{}, unexpected(res)
		}
		taken, _ := arr[1].(int64)
		r.Left, _ = arr[2].(int64)
		r.Kind, _ = arr[2].(string)
		raw = arr[3:]
		if int64(len(raw)) != taken || taken >= int64(n) {
			return SetReply{}, errors.New("unexpected reply: wrong number of tokens")
		}
	default:
		return SetReply{}, unexpected(res)
	}
	r.Tokens = make([]int64, len(raw))
	for i, v := range raw {
		t, err := ParseToken(v)
		if err != nil {
			return SetReply{}, err
		}
		r.Tokens[i] = t
	}
	return r, nil
}

// A Grant is one grant to a waiter of the caller's Locker that a reply revealed.
type Grant struct {
	Element string
	Token   int64
	Now     bool // the poll script: granted by this call
}

// ParseRelease reads the release script's reply for one resource: its code (Released,
// NotHeld, Granted or Layout) and the grants to the caller's Locker.
func ParseRelease(res any) (int64, []Grant, error) {
	switch r := res.(type) {
	case int64:
		if r == Released || r == NotHeld || r == Layout {
			return r, nil, nil
		}
	case []any:
		if len(r) > 0 && r[0] == int64(Granted) {
			grants, err := parseGrants(r, 2)
			return Granted, grants, err
		}
	}
	return 0, nil, unexpected(res)
}

// A PollReply is the poll script's reply.
type PollReply struct {
	Code   int64   // Granted, Busy or Layout
	Grants []Grant // Granted
	Held   string  // Busy: the exclusive holder's lock value, or ""
	Left   int64   // Busy: milliseconds until the holders let the resource change hands; -1 when free
}

// ParsePoll reads the poll script's reply.
func ParsePoll(res []any) (PollReply, error) {
	if len(res) == 0 {
		return PollReply{}, unexpected(res)
	}
	code, _ := res[0].(int64)
	r := PollReply{Code: code, Left: -1}
	switch code {
	case Granted:
		grants, err := parseGrants(res, 3)
		r.Grants = grants
		return r, err
	case Busy:
		if len(res) > 1 {
			r.Held, _ = res[1].(string)
		}
		if len(res) > 2 {
			r.Left, _ = res[2].(int64)
		}
		return r, nil
	case Layout:
		return r, nil
	}
	return PollReply{}, unexpected(res)
}

// ParseTTL reads the TTL script's reply: the lease left, and false when not held.
func ParseTTL(res any) (time.Duration, bool, error) {
	switch r := res.(type) {
	case int64:
		if r == NotHeld {
			return 0, false, nil
		}
	case []any:
		if len(r) == 2 && r[0] == int64(Taken) {
			left, _ := r[1].(int64)
			return time.Duration(left) * time.Millisecond, true, nil
		}
	}
	return 0, false, unexpected(res)
}

// parseGrants reads the grants of a reply {Granted, element, token, ...} (step 2) or of the
// poll script's {Granted, element, token, now, ...} (step 3).
func parseGrants(arr []any, step int) ([]Grant, error) {
	if len(arr) < 1+step || (len(arr)-1)%step != 0 {
		return nil, unexpected(arr)
	}
	out := make([]Grant, 0, (len(arr)-1)/step)
	for i := 1; i < len(arr); i += step {
		elem, _ := arr[i].(string)
		token, err := ParseToken(arr[i+1])
		if err != nil {
			return nil, err
		}
		g := Grant{Element: elem, Token: token}
		if step == 3 {
			g.Now = arr[i+2] == int64(1)
		}
		out = append(out, g)
	}
	return out, nil
}

// ParseToken reads a token that a script returned as a string.
func ParseToken(v any) (int64, error) {
	s, _ := v.(string)
	token, err := strconv.ParseInt(s, 10, 64)
	if err != nil || token <= 0 {
		return 0, fmt.Errorf("bad token %q in reply", s)
	}
	return token, nil
}

func unexpected(res any) error { return fmt.Errorf("unexpected reply %v", res) }

// A State is what the inspect script read of a resource.
type State struct {
	Now        time.Time // the server's clock
	Kind       string    // "" (no lock), "x", "s", "l<n>"; "old:s", "old:l<n>" for the earlier layout
	Holders    []Holder
	Counter    int64         // the last token issued; 0 when there is no counter
	CounterTTL time.Duration // the counter's expiry; 0 when it has none
	Queue      []string      // the queue's elements, head first
	Waiting    map[string]string
}

// A Holder is one holder the inspect script read.
type Holder struct {
	Owner string
	Token int64
	End   time.Time // by the server's clock
}

// ParseState reads the inspect script's reply.
func ParseState(res []any) (State, error) {
	if len(res) != 7 {
		return State{}, unexpected(res)
	}
	str := func(v any) string { s, _ := v.(string); return s }
	now, err := strconv.ParseInt(str(res[0]), 10, 64)
	if err != nil {
		return State{}, unexpected(res)
	}
	st := State{Now: time.UnixMilli(now), Kind: str(res[1]), Waiting: map[string]string{}}
	holders, _ := res[2].([]any)
	for i := 0; i+2 < len(holders); i += 3 {
		token, err1 := strconv.ParseInt(str(holders[i+1]), 10, 64)
		end, err2 := strconv.ParseInt(str(holders[i+2]), 10, 64)
		if err1 == nil && err2 == nil {
			st.Holders = append(st.Holders, Holder{Owner: str(holders[i]), Token: token, End: time.UnixMilli(end)})
		}
	}
	if n, err := strconv.ParseInt(str(res[3]), 10, 64); err == nil && n > 0 {
		st.Counter = n
		if pttl, _ := res[4].(int64); pttl > 0 {
			st.CounterTTL = time.Duration(pttl) * time.Millisecond
		}
	}
	queue, _ := res[5].([]any)
	for _, e := range queue {
		st.Queue = append(st.Queue, str(e))
	}
	ws, _ := res[6].([]any)
	for i := 0; i+1 < len(ws); i += 2 {
		st.Waiting[str(ws[i])] = str(ws[i+1])
	}
	return st, nil
}
