package wire

import (
	"encoding/base32"
	"encoding/base64"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Keys are the names one resource uses, all with one hash tag: in one Redis Cluster slot.
type Keys struct {
	Lock    string // the holders: a string for an exclusive one, a hash for others
	Fence   string // the token counter
	Queue   string // the waiters' queue elements, in order
	Channel string // grants to a Locker's waiters are announced on Channel + ":<Locker id>"
}

// For returns the keys of resource under prefix: <prefix>{R}:lock, :fence, :queue and the channel
// base :grant for a name R without '{' or '}'; any other is encoded as unpadded base64url, with a
// marker that keeps the forms apart: <prefix>{base64url(R)}:b64:lock. Only an empty R has no tag.
func For(prefix, resource string) Keys {
	tag, kind := resource, ""
	if strings.ContainsAny(resource, "{}") {
		tag, kind = base64.RawURLEncoding.EncodeToString([]byte(resource)), ":b64"
	}
	// One allocation holds the four names, one after the other.
	var b strings.Builder
	b.Grow(4*(len(prefix)+len(tag)+len(kind)+3) + len("lockfencequeuegrant"))
	var ends [4]int
	for i, name := range [4]string{"lock", "fence", "queue", "grant"} {
		b.WriteString(prefix)
		b.WriteByte('{')
		b.WriteString(tag)
		b.WriteByte('}')
		b.WriteString(kind)
		b.WriteByte(':')
		b.WriteString(name)
		ends[i] = b.Len()
	}
	s := b.String()
	return Keys{Lock: s[:ends[0]], Fence: s[ends[0]:ends[1]], Queue: s[ends[1]:ends[2]], Channel: s[ends[2]:]}
}

// Base returns the common part of the resource's names, "<prefix>{R}:".
func (k Keys) Base() string { return strings.TrimSuffix(k.Lock, "lock") }

// Waiter returns the waiter key of the Locker with id.
func (k Keys) Waiter(id string) string { return k.Base() + "w:" + id }

// Grants returns the channel that announces grants to the waiters of the Locker with id.
func (k Keys) Grants(id string) string { return k.Channel + ":" + id }

// Record returns the key of the outcome of the release of lock value v.
func (k Keys) Record(v string) string { return k.Base() + "r:" + v }

// Memo returns the key of the resource's memo name (see ValidMemo).
func (k Keys) Memo(name string) string { return k.Base() + name }

// GrantsOf returns the keys whose Grants(id) is ch, and false when there are none.
func GrantsOf(ch, id string) (Keys, bool) {
	base, ok := strings.CutSuffix(ch, ":"+id)
	if !ok {
		return Keys{}, false
	}
	b := strings.TrimSuffix(base, "grant")
	return Keys{Lock: b + "lock", Fence: b + "fence", Queue: b + "queue", Channel: base}, true
}

// ResourceOf returns the resource whose lock key under prefix is key (For's reverse), or false.
func ResourceOf(prefix, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefix+"{")
	if !ok {
		return "", false
	}
	if tag, ok := strings.CutSuffix(rest, "}:b64:lock"); ok && !strings.ContainsAny(tag, "{}") {
		name, err := base64.RawURLEncoding.DecodeString(tag)
		if err != nil || !strings.ContainsAny(string(name), "{}") {
			return "", false
		}
		return string(name), true
	}
	name, ok := strings.CutSuffix(rest, "}:lock")
	if !ok || name == "" || strings.ContainsAny(name, "{}") {
		return "", false
	}
	return name, true
}

// ValidMemo reports whether name may name a memo of a resource: 1 to 64 letters, digits, '-'
// and '_', and none of the resource's own names.
func ValidMemo(name string) bool {
	if name == "" || len(name) > 64 || slices.Contains([]string{"lock", "fence", "queue", "grant", "b64"}, name) {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// A Kind is a kind of acquisition: exclusive (Limit 1), shared, or one of Limit > 1 slots.
type Kind struct {
	Shared bool
	Limit  int // 0 or 1: exclusive, unless Shared
}

// Exclusive reports whether k is the exclusive lock.
func (k Kind) Exclusive() bool { return !k.Shared && k.Limit <= 1 }

// Arg returns k as the scripts write it: "x", "s" or "l<n>".
func (k Kind) Arg() string {
	switch {
	case k.Shared:
		return "s"
	case k.Limit > 1:
		return "l" + strconv.Itoa(k.Limit)
	}
	return "x"
}

// ParseKind reads a kind as the scripts write it.
func ParseKind(s string) (Kind, bool) {
	switch {
	case s == "x":
		return Kind{Limit: 1}, true
	case s == "s":
		return Kind{Shared: true}, true
	case strings.HasPrefix(s, "l"):
		n, err := strconv.Atoi(s[1:])
		return Kind{Limit: n}, err == nil && n > 1 && strconv.Itoa(n) == s[1:]
	}
	return Kind{}, false
}

// Value returns the lock value of an acquisition: "<owner>:<token>".
func Value(owner string, token int64) string { return owner + ":" + strconv.FormatInt(token, 10) }

// SplitValue splits a lock value "<owner>:<token>", with or without a queue's mark '+'.
func SplitValue(v string) (owner string, token int64, ok bool) {
	v = strings.TrimSuffix(v, "+")
	i := strings.LastIndexByte(v, ':')
	if i < 0 {
		return "", 0, false
	}
	token, err := strconv.ParseInt(v[i+1:], 10, 64)
	return v[:i], token, err == nil && token > 0
}

// labels encodes a label in an element: base32 without padding, whose alphabet (A-Z, 2-7) has none
// of the letters of an element's rules, which the scripts, of earlier versions too, read as before.
var labels = base32.StdEncoding.WithPadding(base32.NoPadding)

// Labeled returns s, an owner or an element (which, unlike an owner, holds a '.'), with label
// (fencing.WithLabel; if not "") after a '~': in an element encoded by labels, in an owner as it
// is but for '%', ':', '.' and '~', "%XX" (a lock value splits at its last ':', an element at '.').
func Labeled(s, label string) string {
	if label == "" {
		return s
	}
	b := make([]byte, 0, len(s)+1+2*len(label))
	b = append(append(b, s...), '~')
	if strings.IndexByte(s, '.') >= 0 {
		return string(labels.AppendEncode(b, []byte(label)))
	}
	for i := 0; i < len(label); i++ {
		switch c := label[i]; c {
		case '%', ':', '.', '~':
			b = append(b, '%', "0123456789ABCDEF"[c>>4], "0123456789ABCDEF"[c&15])
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

// LabelOf returns the label of an owner or an element (see Labeled), "" when it has none.
func LabelOf(owner string) string {
	i := strings.LastIndexByte(owner, '~')
	if i < 0 {
		return ""
	}
	if strings.IndexByte(owner, '.') >= 0 { // an element
		if b, err := labels.DecodeString(owner[i+1:]); err == nil {
			return string(b)
		}
		return ""
	}
	label, _ := url.PathUnescape(owner[i+1:]) // "" on error
	return label
}

// An Element is a waiter's entry in a resource's queue: "<Locker id>.<n>.<lease ms>", its grant's
// Rules (followed whichever Locker grants it), 's' for a shared waiter or 'l<n>' for one of n
// slots, then its label (see Labeled).
type Element struct {
	Locker string        // the waiting Locker's id
	Seq    uint64        // numbers the Locker's waiters
	Lease  time.Duration // a grant's lease, in whole milliseconds
	Floor  bool          // tokens at or above the server clock in microseconds
	Expiry time.Duration // the counter's expiry after a grant; 0: it does not expire
	Kind   Kind
	Label  string // the waiter's label (see Labeled), or ""
}

// String returns the element as the queue holds it.
func (e Element) String() string {
	b := make([]byte, 0, len(e.Locker)+32)
	b = append(b, e.Locker...)
	b = append(b, '.')
	b = strconv.AppendUint(b, e.Seq, 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, e.Lease.Milliseconds(), 10)
	b = append(b, Rules(e.Floor, e.Expiry)...)
	switch {
	case e.Kind.Shared:
		b = append(b, 's')
	case e.Kind.Limit > 1:
		b = append(b, 'l')
		b = strconv.AppendInt(b, int64(e.Kind.Limit), 10)
	}
	return Labeled(string(b), e.Label)
}

// Rules returns the token rules as elements and acquire scripts write them (token.lua reads them):
// "" for the counter alone, "f" for the server clock's floor, "e<ms>" for it and a counter expiry.
func Rules(floor bool, expiry time.Duration) string {
	switch {
	case expiry > 0:
		return "e" + strconv.FormatInt(expiry.Milliseconds(), 10)
	case floor:
		return "f"
	}
	return ""
}

// ParseElement reads an element as element.lua does; ok is false for what it cannot read, which
// the scripts drop, without a grant, at the head of the queue.
func ParseElement(s string) (e Element, ok bool) {
	id, rest, found := strings.Cut(s, ".")
	if !found {
		return Element{}, false
	}
	seq, rest, found := strings.Cut(rest, ".")
	n, err := strconv.ParseUint(seq, 10, 64) // digits only
	if !found || err != nil {
		return Element{}, false
	}
	end := digitsEnd(rest, 0)
	lease, err := strconv.ParseInt(rest[:end], 10, 64)
	if end == 0 || err != nil {
		return Element{}, false
	}
	e = Element{Locker: id, Seq: n, Lease: time.Duration(lease) * time.Millisecond, Kind: Kind{Limit: 1}}
	rules := rest[end:]
	if i := strings.IndexByte(rules, '~'); i >= 0 {
		label, _ := labels.DecodeString(rules[i+1:]) // the scripts read no label: one they cannot read is none
		e.Label, rules = string(label), rules[:i]
	}
	if i := strings.IndexByte(rules, 'e'); i >= 0 {
		if ms, err := strconv.ParseInt(rules[i+1:digitsEnd(rules, i+1)], 10, 64); err == nil {
			e.Floor, e.Expiry = true, time.Duration(ms)*time.Millisecond
		}
	}
	e.Floor = e.Floor || strings.IndexByte(rules, 'f') >= 0
	if strings.IndexByte(rules, 's') >= 0 {
		e.Kind = Kind{Shared: true}
	} else if i := strings.IndexByte(rules, 'l'); i >= 0 {
		if n, err := strconv.Atoi(rules[i+1 : digitsEnd(rules, i+1)]); err == nil {
			e.Kind = Kind{Limit: n}
		}
	}
	return e, true
}

// digitsEnd returns where the ASCII digits of s that start at i end.
func digitsEnd(s string, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// WaiterValue returns the value of a Locker's waiter key: since when it waits, in unix ms.
func WaiterValue(since time.Time) string { return strconv.FormatInt(since.UnixMilli(), 10) }

// ParseWaiterValue reads a waiter key's value, also in the earlier form "<lease>:<floor>:<since>".
func ParseWaiterValue(v string) (time.Time, bool) {
	ms, err := strconv.ParseInt(v[strings.LastIndexByte(v, ':')+1:], 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// HashHolders reads the hash of a shared or limited lock from HGETALL, in this layout or the
// earlier one (old), as inspect.lua does: the holders' kind and every holder, live or not.
func HashHolders(fields map[string]string) (kind Kind, holders []Holder, old bool) {
	v, old := fields["limit"]
	switch n, _ := strconv.Atoi(v); {
	case !old:
		kind, _ = ParseKind(fields["k"])
	case v == "shared":
		kind = Kind{Shared: true}
	default:
		kind = Kind{Limit: n}
	}
	for f, v := range fields {
		if len(f) <= 1 || f == "limit" || f == "until" {
			continue
		}
		owner, endText, tokenText := f, v, ""
		if old {
			i := strings.LastIndexByte(f, ':')
			if i < 0 {
				continue
			}
			owner, tokenText = f[:i], f[i+1:]
		} else {
			endText, tokenText, _ = strings.Cut(v, ":")
		}
		end, err1 := strconv.ParseInt(endText, 10, 64)
		token, err2 := strconv.ParseInt(tokenText, 10, 64)
		if err1 == nil && err2 == nil {
			holders = append(holders, Holder{Owner: owner, Token: token, End: time.UnixMilli(end)})
		}
	}
	return kind, holders, old
}
