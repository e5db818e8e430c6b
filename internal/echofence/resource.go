package echofence

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/fencekit/fencekit/fencing"
)

// Defaults and limits of the adapters' Config.
const (
	// DefaultKeyLookup is where the key is found when KeyLookup is empty: the path parameter
	// "id".
	DefaultKeyLookup = "param:id"
	// DefaultContextKey is the Echo context key of the token when ContextKey is empty.
	DefaultContextKey = "fencing.token"
	// MaxKeyLen is the longest key, in bytes, that a request may give.
	MaxKeyLen = 1024
)

// resource returns the name of the request's lock, or an error wrapping fencing.ErrInvalid
// when the request has no valid key or the name would be longer than fencing.MaxResourceLen.
func (f *Fence[C]) resource(c C) (string, error) {
	key, err := f.extract(c)
	if err != nil {
		return "", &ownError{msg: "resource key", cause: err, is: []error{fencing.ErrInvalid}}
	}
	if err := ValidKey(key); err != nil {
		return "", err
	}
	var name string
	if f.namespace == "" {
		name = RouteName(c.Path(), key)
	} else {
		name = Qualify(f.namespace, key)
	}
	if len(name) > fencing.MaxResourceLen {
		return "", invalidf("resource name of %d bytes exceeds %d", len(name), fencing.MaxResourceLen)
	}
	return name, nil
}

// ValidKey accepts a non-empty key of at most MaxKeyLen bytes of valid UTF-8 without control
// characters (NUL, line breaks, DEL and the like), which no identifier needs. Otherwise it
// returns an error wrapping fencing.ErrInvalid.
func ValidKey(key string) error {
	switch {
	case key == "":
		return invalidf("empty resource key")
	case len(key) > MaxKeyLen:
		return invalidf("resource key of %d bytes exceeds %d", len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return invalidf("resource key is not valid UTF-8")
	case strings.IndexFunc(key, unicode.IsControl) >= 0:
		return invalidf("resource key contains a control character")
	}
	return nil
}

// RouteName returns the default lock name, "<route> <key>": the route path as Echo
// registered it (c.Path(), such as "/orders/:id") and the key, separated by one space, with
// any '%' or ' ' in the route percent-encoded, so the first space ends the route. The name
// always starts with '/' (Echo's route paths do; one that does not gets it), which no
// [Qualify] name does, so default names and Namespace names never meet.
func RouteName(path, key string) string {
	var b strings.Builder
	b.Grow(1 + len(path) + 1 + len(key) + 8)
	if !strings.HasPrefix(path, "/") {
		b.WriteByte('/')
	}
	escapeSpace(&b, path)
	b.WriteByte(' ')
	b.WriteString(key)
	return b.String()
}

// escapeSpace writes s to b with any ' ' and '%' percent-encoded, so that a space after it
// ends it.
func escapeSpace(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; ch {
		case ' ':
			b.WriteString("%20")
		case '%':
			b.WriteString("%25")
		default:
			b.WriteByte(ch)
		}
	}
}

// Qualify returns "<namespace>:<key>" with ':' and '%' in the namespace, and a '/' that
// starts it, percent-encoded: the first ':' of the result then ends the namespace, so two
// different (namespace, key) pairs never give the same name, whatever the key holds, and no
// name starts with '/' as the default [RouteName] names do.
func Qualify(namespace, key string) string {
	var b strings.Builder
	b.Grow(len(namespace) + 1 + len(key) + 8)
	for i := 0; i < len(namespace); i++ {
		switch ch := namespace[i]; {
		case ch == ':':
			b.WriteString("%3A")
		case ch == '%':
			b.WriteString("%25")
		case ch == '/' && i == 0:
			b.WriteString("%2F")
		default:
			b.WriteByte(ch)
		}
	}
	b.WriteByte(':')
	b.WriteString(key)
	return b.String()
}
