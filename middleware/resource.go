package middleware

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/errtext"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
)

// MaxKeyLen is the longest key, in bytes, that a request may give; a longer one is answered
// 400. The whole resource name, namespace included, must also fit in
// [fencing.MaxResourceLen].
const MaxKeyLen = 1024

// resource returns the name of the request's lock, or an error wrapping fencing.ErrInvalid
// when the request has no valid key.
func (f *fence) resource(c echo.Context) (string, error) {
	key, err := f.extract(c)
	if err != nil {
		return "", errtext.New("fencemw: ", "resource key", fencing.ErrInvalid, err)
	}
	if err := validKey(key); err != nil {
		return "", err
	}
	var name string
	if f.namespace == "" {
		name = routeName(c.Path(), key)
	} else {
		name = qualify(f.namespace, key)
	}
	if len(name) > fencing.MaxResourceLen {
		return "", invalidf("resource name of %d bytes exceeds %d", len(name), fencing.MaxResourceLen)
	}
	return name, nil
}

// validKey accepts a non-empty key of at most MaxKeyLen bytes of valid UTF-8 without
// control characters (NUL, line breaks, DEL and the like), which no identifier needs.
func validKey(key string) error {
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

// routeName returns the default lock name, "<route> <key>": the route path as Echo
// registered it (c.Path(), such as "/orders/:id") and the key, separated by one space, with
// any '%' or ' ' in the route percent-encoded, so the first space ends the route. The name
// always starts with '/' (Echo's route paths do; one that does not gets it), which no
// [qualify] name does, so default names and Namespace names never meet.
func routeName(path, key string) string {
	var b strings.Builder
	b.Grow(1 + len(path) + 1 + len(key) + 8)
	if !strings.HasPrefix(path, "/") {
		b.WriteByte('/')
	}
	for i := 0; i < len(path); i++ {
		switch ch := path[i]; ch {
		case ' ':
			b.WriteString("%20")
		case '%':
			b.WriteString("%25")
		default:
			b.WriteByte(ch)
		}
	}
	b.WriteByte(' ')
	b.WriteString(key)
	return b.String()
}

// qualify returns "<namespace>:<key>" with ':' and '%' in the namespace, and a '/' that
// starts it, percent-encoded: the first ':' of the result then ends the namespace, so two
// different (namespace, key) pairs never give the same name, whatever the key holds, and no
// name starts with '/' as the default [routeName] names do.
func qualify(namespace, key string) string {
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

// lookupExtractor parses a KeyLookup string into an extractor that returns the first value
// of the first source whose first value is not empty. Only the first value of a source
// counts, since it is the one c.Param, c.QueryParam and Header.Get give the handler.
func lookupExtractor(lookup string) (func(c echo.Context) (string, error), error) {
	for _, src := range strings.Split(lookup, ",") {
		kind, name, _ := strings.Cut(src, ":")
		switch kind {
		case "param", "header", "query", "form", "cookie":
			// The sources middleware.CreateExtractors knows; it silently ignores others.
		default:
			name = ""
		}
		if name == "" || strings.HasPrefix(name, ":") {
			return nil, invalidf("KeyLookup source %q: want param:<name>, header:<name>, query:<name>, form:<name> or cookie:<name>", src)
		}
	}
	extractors, err := middleware.CreateExtractors(lookup)
	if err != nil {
		return nil, invalidf("KeyLookup %q: %v", lookup, err)
	}
	return func(c echo.Context) (string, error) {
		var last error
		for _, extract := range extractors {
			values, err := extract(c)
			if err != nil {
				last = err
				continue
			}
			if len(values) > 0 && values[0] != "" {
				return values[0], nil
			}
		}
		return "", last
	}, nil
}
