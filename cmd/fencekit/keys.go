package main

import (
	"encoding/base64"
	"strings"
)

// The key layout of package fencing. For a resource R and prefix P, a name without '{' or
// '}' has the tag {R}; any other name the tag {base64url(R)}:b64 (unpadded). Every key of
// the resource is P<tag>:<suffix>, so all of them share one Cluster slot.
const (
	suffixLock   = "lock"
	suffixFence  = "fence"
	suffixQueue  = "queue"
	suffixWaiter = "w:"   // followed by the Locker's id
	suffixRecord = "r:"   // followed by a released lock's value: a release's outcome, for 10 s
	suffixIdem   = "idem" // the Echo idempotency middleware's record of a request's result
	b64Marker    = ":b64"
)

// resourceKeys holds the keys of one resource.
type resourceKeys struct {
	base  string // P<tag>: ; every key is base + suffix
	lock  string
	fence string
	queue string
}

func keysFor(prefix, resource string) resourceKeys {
	tag, kind := resource, ""
	if strings.ContainsAny(resource, "{}") {
		tag, kind = base64.RawURLEncoding.EncodeToString([]byte(resource)), b64Marker
	}
	base := prefix + "{" + tag + "}" + kind + ":"
	return resourceKeys{base: base, lock: base + suffixLock, fence: base + suffixFence, queue: base + suffixQueue}
}

func (k resourceKeys) waiter(element string) string {
	return k.base + suffixWaiter + lockerOf(element)
}

// lockerOf returns the Locker id of a queue element, "<Locker id>.<n>.<lease ms><rules>".
func lockerOf(element string) string {
	id, _, _ := strings.Cut(element, ".")
	return id
}

// parseKey splits a key of the layout into its resource name and suffix ("lock", "fence",
// "queue", "w:<id>", "r:<owner>:<token>", "idem"). ok is false for a key that does not follow the layout.
func parseKey(prefix, key string) (resource, suffix string, ok bool) {
	rest, found := strings.CutPrefix(key, prefix)
	if !found || !strings.HasPrefix(rest, "{") {
		return "", "", false
	}
	end := strings.IndexByte(rest, '}')
	if end < 2 { // no '}', or an empty tag
		return "", "", false
	}
	tag, after := rest[1:end], rest[end+1:]
	if enc, found := strings.CutPrefix(after, b64Marker+":"); found {
		name, err := base64.RawURLEncoding.DecodeString(tag)
		if err != nil || !strings.ContainsAny(string(name), "{}") {
			return "", "", false // not a form a Locker writes
		}
		return string(name), enc, enc != ""
	}
	suffix, found = strings.CutPrefix(after, ":")
	if !found || suffix == "" || strings.ContainsAny(tag, "{") {
		return "", "", false
	}
	return tag, suffix, true
}

// escapeGlob escapes the characters that SCAN MATCH treats as special.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// globMatch reports whether name matches pattern with the rules of Redis's SCAN MATCH and
// KEYS: '*' matches any run of bytes (also '/'), '?' one byte, [abc], [^a-z] and [!a-z] a
// class, and '\' escapes the next character. A malformed pattern matches what it can, as
// in Redis.
func globMatch(pattern, name string) bool {
	p, s := 0, 0
	starP, starS := -1, 0
	for s < len(name) {
		if p < len(pattern) {
			switch c := pattern[p]; c {
			case '*':
				starP, starS = p, s
				p++
				continue
			case '?':
				p++
				s++
				continue
			case '[':
				if next, ok := matchClass(pattern, p, name[s]); ok {
					p = next
					s++
					continue
				}
			case '\\':
				if p+1 < len(pattern) && pattern[p+1] == name[s] {
					p += 2
					s++
					continue
				}
			default:
				if c == name[s] {
					p++
					s++
					continue
				}
			}
		}
		if starP < 0 {
			return false
		}
		starS++
		p, s = starP+1, starS
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// matchClass matches byte c against the class that opens at pattern[p] == '['. It returns
// the index after the class and whether c is in it.
func matchClass(pattern string, p int, c byte) (int, bool) {
	p++
	negate := false
	if p < len(pattern) && (pattern[p] == '^' || pattern[p] == '!') {
		negate = true
		p++
	}
	match := false
	for first := true; p < len(pattern) && (first || pattern[p] != ']'); first = false {
		lo := pattern[p]
		if lo == '\\' && p+1 < len(pattern) {
			p++
			lo = pattern[p]
		}
		hi := lo
		if p+2 < len(pattern) && pattern[p+1] == '-' && pattern[p+2] != ']' {
			hi = pattern[p+2]
			p += 2
			if lo > hi {
				lo, hi = hi, lo
			}
		}
		if lo <= c && c <= hi {
			match = true
		}
		p++
	}
	if p < len(pattern) {
		p++ // the closing ']'
	}
	return p, match != negate
}
