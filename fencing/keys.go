package fencing

import (
	"encoding/base64"
	"strings"
)

// MaxResourceLen is the longest resource name, in bytes, that a Locker accepts.
const MaxResourceLen = 4096

// keys holds the Redis names one resource uses. All share one hash tag, so they fall in the
// same Redis Cluster slot.
type keys struct {
	lock    string // "<owner>:<token>", with the lease as its TTL
	fence   string // the token counter
	queue   string // the waiting Lockers' ids, in order (see lib.lua)
	channel string // grants to a Locker's waiters are announced on channel + ":<Locker id>"
}

// resourceKeys returns the keys of resource under prefix.
//
// A name without '{' or '}' is used as it is: <prefix>{R}:lock, <prefix>{R}:fence,
// <prefix>{R}:queue, the waiting Lockers' keys <prefix>{R}:w:<id> and channels
// <prefix>{R}:grant:<id> (channel is <prefix>{R}:grant, which each Locker extends with its
// id). Any other name is encoded as unpadded base64url,
// which never contains a brace, with a ":b64" marker after the tag:
// <prefix>{base64url(R)}:b64:lock. The marker keeps the two forms apart: a plain key has
// ":lock" right after the first '}', an encoded one ":b64:lock". The tag is never empty
// because empty names are rejected.
func resourceKeys(prefix, resource string) keys {
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
	return keys{lock: s[:ends[0]], fence: s[ends[0]:ends[1]], queue: s[ends[1]:ends[2]], channel: s[ends[2]:]}
}

// channelKeys returns the keys of the resource whose channel is ch.
func channelKeys(ch string) keys {
	base := strings.TrimSuffix(ch, "grant")
	return keys{lock: base + "lock", fence: base + "fence", queue: base + "queue", channel: ch}
}

// beside returns the name of a key of k's resource with the given suffix, "<prefix>{R}:<suffix>",
// in the lock's Cluster slot.
func (k keys) beside(suffix string) string {
	return strings.TrimSuffix(k.lock, "lock") + suffix
}

// grants returns the channel on which grants of k's resource to the waiters of the Locker
// with id are announced (lib.lua builds the same name).
func (k keys) grants(id string) string { return k.channel + ":" + id }

// grantsOf returns the keys of the resource whose grants to the Locker with id are announced
// on ch, and false when ch is not such a channel.
func grantsOf(ch, id string) (keys, bool) {
	base, ok := strings.CutSuffix(ch, ":"+id)
	return channelKeys(base), ok
}

// triple returns the keys of one resource as the scripts take them (see lib.lua's resource).
func (k keys) triple() []string {
	return []string{k.lock, k.fence, k.queue}
}

// validResource returns an error wrapping ErrInvalid when resource cannot be locked.
func validResource(resource string) error {
	switch {
	case resource == "":
		return invalidf("empty resource name")
	case len(resource) > MaxResourceLen:
		return invalidf("resource name of %d bytes exceeds %d", len(resource), MaxResourceLen)
	}
	return nil
}
