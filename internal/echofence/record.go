package echofence

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// A record is a stored result: the response to replay, the fingerprint of the request that
// produced it, and the fencing token under which it was committed.
//
// It is kept as one Redis string, "<prefix>{R}:idem" beside the key's lock (so in its
// Cluster slot), in this encoding, version 1 (docs/design.md, "The idempotency record"):
//
//	1:<token>:<status>:<n>:<fingerprint><h>:(<n>:<name><n>:<value>)*<body>
//
// where <token> is the token in decimal, <status> the three-digit HTTP status, each <n> the
// length in bytes of what follows it (decimal, no leading zeros), <h> the number of header
// fields, each a name and one value (a header with several values has several fields, in
// order; names in canonical form, sorted), and <body> the rest of the string. The commit
// script reads the token with the pattern '^1:([0-9]+):'. The encoding is canonical:
// decoding and encoding again give the same bytes.
type record struct {
	token       int64
	status      int
	fingerprint string
	header      http.Header
	body        []byte
}

// errRecord is the cause of every decoding error.
var errRecord = errors.New("malformed record")

// encode returns r in the version 1 encoding.
func (r *record) encode() []byte {
	names := make([]string, 0, len(r.header))
	size := 32 + len(r.fingerprint) + len(r.body)
	for name, values := range r.header {
		names = append(names, name)
		for _, v := range values {
			size += len(name) + len(v) + 8
		}
	}
	slices.Sort(names)
	b := make([]byte, 0, size)
	b = append(b, "1:"...)
	b = strconv.AppendInt(b, r.token, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(r.status), 10)
	b = append(b, ':')
	b = appendField(b, r.fingerprint)
	n := 0
	for _, name := range names {
		n += len(r.header[name])
	}
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, ':')
	for _, name := range names {
		for _, v := range r.header[name] {
			b = appendField(b, name)
			b = appendField(b, v)
		}
	}
	return append(b, r.body...)
}

// appendField appends "<len(s)>:<s>".
func appendField(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

// decodeRecord parses the version 1 encoding. It accepts only what encode produces: a
// positive token, a status from 100 to 999, numbers without leading zeros, header names in
// canonical form and sorted. Any other input returns an error matching errRecord.
func decodeRecord(s string) (*record, error) {
	d := decoder{s: s}
	if !strings.HasPrefix(s, "1:") {
		return nil, fmt.Errorf("%w: unknown version", errRecord)
	}
	d.s = s[2:]
	r := &record{}
	r.token = d.number()
	status := d.number()
	r.fingerprint = d.field()
	n := d.number()
	if d.err == nil && (r.token < 1 || status < 100 || status > 999) {
		d.fail("token or status out of range")
	}
	r.status = int(status)
	last := ""
	for i := int64(0); i < n && d.err == nil; i++ {
		name, value := d.field(), d.field()
		if d.err != nil {
			break
		}
		if name == "" || http.CanonicalHeaderKey(name) != name || name < last {
			d.fail("header names not canonical and sorted")
			break
		}
		if r.header == nil {
			r.header = http.Header{}
		}
		r.header[name] = append(r.header[name], value)
		last = name
	}
	if d.err != nil {
		return nil, d.err
	}
	r.body = []byte(d.s)
	return r, nil
}

// decoder reads the numbers and fields of an encoded record from s, keeping the first
// error.
type decoder struct {
	s   string
	err error
}

func (d *decoder) fail(why string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", errRecord, why)
	}
}

// number reads "<decimal>:", a non-negative int64 without leading zeros.
func (d *decoder) number() int64 {
	if d.err != nil {
		return 0
	}
	i := strings.IndexByte(d.s, ':')
	digits := d.s[:max(i, 0)]
	if i < 1 || (digits[0] == '0' && i > 1) || strings.Trim(digits, "0123456789") != "" {
		d.fail("bad number")
		return 0
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		d.fail("bad number")
		return 0
	}
	d.s = d.s[i+1:]
	return n
}

// field reads "<len>:<bytes>".
func (d *decoder) field() string {
	n := d.number()
	if d.err != nil {
		return ""
	}
	if n > int64(len(d.s)) {
		d.fail("field longer than the record")
		return ""
	}
	f := d.s[:n]
	d.s = d.s[n:]
	return f
}
