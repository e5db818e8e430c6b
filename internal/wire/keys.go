package wire

import (
	"encoding/base64"
	"slices"
	"strings"
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
