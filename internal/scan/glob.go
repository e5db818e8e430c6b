package scan

import "strings"

// EscapeGlob escapes the characters that SCAN MATCH treats as special, so that s matches
// itself alone.
func EscapeGlob(s string) string {
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

// Match reports whether name matches pattern with the rules of Redis's SCAN MATCH and
// KEYS: '*' matches any run of bytes (also '/'), '?' one byte, [abc], [^a-z] and [!a-z] a
// class, and '\' escapes the next character. A malformed pattern matches what it can, as
// in Redis.
func Match(pattern, name string) bool {
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
