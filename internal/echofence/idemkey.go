package echofence

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/fencekit/fencekit/fencing"
)

// idempotencyKey returns the key a request's header field name carries, and whether it
// has one. The value is the key as it is, or a Structured Field string ("...", as the IETF
// draft writes it) whose quotes and escapes are removed: "abc" and abc are the same key.
// A key must have 1 to MaxIdempotencyKeyLen bytes without control characters; any other
// byte is allowed. An invalid value, or several fields, return an error matching
// fencing.ErrInvalid.
func idempotencyKey(h http.Header, name string) (key string, present bool, err error) {
	values := h.Values(name)
	switch len(values) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", true, keyErr("Send one "+name+" header.", "%d %s fields", len(values), name)
	}
	key = values[0]
	if strings.HasPrefix(key, `"`) {
		if key, err = unquote(key); err != nil {
			return "", true, keyErr("The "+name+" header is not a valid string.", "%s: %v", name, err)
		}
	}
	detail := "The " + name + " header must hold 1 to " + strconv.Itoa(MaxIdempotencyKeyLen) + " bytes without control characters."
	switch {
	case key == "":
		return "", true, keyErr(detail, "empty %s", name)
	case len(key) > MaxIdempotencyKeyLen:
		return "", true, keyErr(detail, "%s of %d bytes exceeds %d", name, len(key), MaxIdempotencyKeyLen)
	case strings.IndexFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0:
		return "", true, keyErr(detail, "%s contains a control character", name)
	}
	return key, true, nil
}

// unquote decodes an sf-string of RFC 9651: printable ASCII between double quotes, with
// '"' and '\' escaped by a backslash. Its errors say what is wrong, without a prefix: the
// caller's error, which has one, ends with their text.
func unquote(s string) (string, error) {
	if len(s) < 2 || s[len(s)-1] != '"' {
		return "", errors.New("unterminated string")
	}
	var b strings.Builder
	for i := 1; i < len(s)-1; i++ {
		ch := s[i]
		switch {
		case ch == '\\':
			i++
			if i == len(s)-1 || s[i] != '"' && s[i] != '\\' {
				return "", errors.New("bad escape in string")
			}
			b.WriteByte(s[i])
		case ch == '"':
			return "", errors.New("unescaped quote in string")
		case ch < 0x20 || ch > 0x7e:
			return "", fmt.Errorf("byte %#x in string", ch)
		default:
			b.WriteByte(ch)
		}
	}
	return b.String(), nil
}

// IdempotencyName returns the name of the lock of an idempotency key, beside which its
// result is kept: ":idem <scope> <route> <key>", the scope and the route with any '%' or
// ' ' percent-encoded, so the first two spaces after ":idem" end them. No name the Fence
// middleware locks starts with ':' (a default name starts with '/', and a Namespace name
// with its namespace, which is never empty), so the two never share a lock.
func IdempotencyName(scope, route, key string) string {
	var b strings.Builder
	b.Grow(len(":idem ") + len(scope) + len(route) + len(key) + 16)
	b.WriteString(":idem ")
	escapeSpace(&b, scope)
	b.WriteByte(' ')
	b.WriteString(RouteName(route, key))
	return b.String()
}

// checkName refuses a name longer than fencing.MaxResourceLen (a Scope that long).
func checkName(name string) error {
	if len(name) > fencing.MaxResourceLen {
		return keyErr("", "resource name of %d bytes exceeds %d", len(name), fencing.MaxResourceLen)
	}
	return nil
}
