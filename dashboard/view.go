package dashboard

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/fencekit/fencekit/fencing"
)

// The modes of an acquisition, as fencekit's JSON names them: the kind of a resource's
// holders and of each waiter.
const (
	modeExclusive = "exclusive" // one holder
	modeShared    = "shared"    // fencing.Shared
	modeLimit     = "limit"     // fencing.WithLimit(n), n > 1
	modeFree      = "free"      // no holder
	// modeUnknown is holders whose kind Inspect cannot read (a hash of an earlier layout).
	modeUnknown = "unknown"
)

// lockView is one resource as the pages show it and its JSON forms give it.
type lockView struct {
	Resource string `json:"resource"`
	// Mode is the holders' kind: "exclusive", "shared", "limit" (Limit is then n), "free"
	// when nobody holds it, or "unknown".
	Mode  string `json:"mode"`
	Limit int    `json:"limit,omitempty"`
	// Holders are by token; Waiters in queue order, the next to be served first.
	Holders []holderView `json:"holders"`
	Waiters []waiterView `json:"waiters"`
	// NextToken is the lowest token the next acquisition gets.
	NextToken int64 `json:"next_token"`
	// CounterTTLMs is how long the counter lives without a new token; 0 when it never
	// expires or there is none.
	CounterTTLMs int64 `json:"counter_ttl_ms"`
}

type holderView struct {
	Token int64  `json:"token"`
	Label string `json:"label"`
	// Owner identifies the acquisition (fencing.Holder.Owner).
	Owner string `json:"owner"`
	// TTLMs is the lease left, by the server's clock; -1 for a lock without expiry.
	TTLMs int64 `json:"ttl_ms"`
}

type waiterView struct {
	Label string `json:"label"`
	// Locker is the id of the Locker the call waits in.
	Locker string `json:"locker"`
	Mode   string `json:"mode"`
	Limit  int    `json:"limit,omitempty"`
	// Alive reports whether its Locker still waits; WaitingMs is how long it has waited,
	// null for a dead waiter.
	Alive     bool   `json:"alive"`
	WaitingMs *int64 `json:"waiting_ms"`
	// TimeFloor and CounterExpiryMs are the rules its token will follow
	// (fencing.WithServerTimeFloor, fencing.WithCounterExpiry; 0 without).
	TimeFloor       bool  `json:"time_floor"`
	CounterExpiryMs int64 `json:"counter_expiry_ms"`
}

// viewOf returns the view of st.
func viewOf(st *fencing.Status) lockView {
	v := lockView{Resource: st.Resource, Holders: []holderView{}, Waiters: []waiterView{}, NextToken: st.NextToken, CounterTTLMs: st.CounterTTL.Milliseconds()}
	v.Mode, v.Limit = modeFree, 0
	if len(st.Holders) > 0 {
		v.Mode, v.Limit = kindMode(st.Shared, st.Limit)
	}
	for _, h := range st.Holders {
		ttl := h.TTL.Milliseconds()
		if h.TTL < 0 {
			ttl = -1
		}
		v.Holders = append(v.Holders, holderView{Token: h.Token, Label: h.Label, Owner: h.Owner, TTLMs: ttl})
	}
	for _, w := range st.Waiters {
		wv := waiterView{Label: w.Label, Locker: w.Locker, Alive: w.Alive, TimeFloor: w.TimeFloor, CounterExpiryMs: w.CounterExpiry.Milliseconds()}
		wv.Mode, wv.Limit = kindMode(w.Shared, w.Limit)
		if w.Alive {
			ms := w.Waiting.Milliseconds()
			wv.WaitingMs = &ms
		}
		v.Waiters = append(v.Waiters, wv)
	}
	return v
}

// kindMode returns the mode of a kind as fencing reports it, and the limit for modeLimit.
func kindMode(shared bool, limit int) (string, int) {
	switch {
	case shared:
		return modeShared, 0
	case limit == 1:
		return modeExclusive, 0
	case limit > 1:
		return modeLimit, limit
	}
	return modeUnknown, 0
}

// modeText formats a mode for the page: "exclusive", "shared", "limit 4", "free", "?".
func modeText(mode string, limit int) string {
	switch mode {
	case modeExclusive, modeShared, modeFree:
		return mode
	case modeLimit:
		return "limit " + strconv.Itoa(limit)
	}
	return "?"
}

// displayName returns a name or a label for the page: as it is when every character is
// printable and it has no leading or trailing space, else quoted as a Go string.
func displayName(s string) string {
	if s == "" || strings.TrimSpace(s) != s {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// duration formats milliseconds compactly: "450ms", "29.8s", "12m34s", "1h30m".
func duration(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < 0:
		d = 0
	case d < time.Second:
	case d < time.Minute:
		d = d.Round(100 * time.Millisecond)
	default:
		d = d.Round(time.Second)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// lease formats a holder's lease left.
func lease(ms int64) string {
	if ms < 0 {
		return "no expiry"
	}
	return duration(ms)
}

// writeJSON answers v as JSON with status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away
}

// fail answers err with status code: {"error": "..."} to a request for a JSON form, a page
// that says what happened otherwise.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, code int, err error) {
	if api(r) || h.pages == nil {
		writeJSON(w, code, struct {
			Error string `json:"error"`
		}{err.Error()})
		return
	}
	h.render(w, code, "error", errorPage{page: h.page("Error", 0), Code: code, Status: http.StatusText(code), Message: err.Error()})
}
