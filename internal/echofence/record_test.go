package echofence

import (
	"bytes"
	"errors"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// recordSamples are records every encoding test starts from.
var recordSamples = []*record{
	{token: 1, status: 201, fingerprint: strings.Repeat("ab", 32), header: http.Header{"Content-Type": {"application/json"}}, body: []byte(`{"id":1}`)},
	{token: math.MaxInt64, status: 999, fingerprint: "", body: nil},
	{token: 1_800_000_000_000_000, status: 100, fingerprint: "f:p\x00", header: http.Header{
		"Location": {"/a", "/b"}, "Content-Location": {""}, "Content-Type": {"text/plain; charset=utf-8"},
	}, body: []byte("1:2:3:\x00\xff")},
	{token: 42, status: 204, fingerprint: "x", header: http.Header{}, body: []byte{}},
}

func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	for _, r := range recordSamples {
		enc := r.encode()
		got, err := decodeRecord(string(enc))
		if err != nil {
			t.Fatalf("decode(encode(%+v)) = %v", r, err)
		}
		if got.token != r.token || got.status != r.status || got.fingerprint != r.fingerprint || !bytes.Equal(got.body, r.body) ||
			len(got.header) != nonEmpty(r.header) {
			t.Errorf("round trip of %+v gave %+v", r, got)
		}
		for name, values := range got.header {
			if !reflect.DeepEqual(values, r.header[name]) {
				t.Errorf("header %s: got %q, want %q", name, values, r.header[name])
			}
		}
		if again := got.encode(); !bytes.Equal(again, enc) {
			t.Errorf("encoding is not canonical: %q, then %q", enc, again)
		}
	}
	if got := string(recordSamples[0].encode()); got != "1:1:201:64:"+strings.Repeat("ab", 32)+"1:12:Content-Type16:application/json"+`{"id":1}` {
		t.Errorf("encoding of the first sample: %q", got)
	}
}

// nonEmpty counts the header's names that have values.
func nonEmpty(h http.Header) int {
	n := 0
	for _, v := range h {
		if len(v) > 0 {
			n++
		}
	}
	return n
}

func TestDecodeRecordRefuses(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"", "1", "1:", "2:1:200:0:0:", "1:0:200:0:0:", "1:01:200:0:0:", "1:1:99:0:0:", "1:1:1000:0:0:",
		"1:1:200:5:abc", "1:1:200:0:1:", "1:1:200:0:1:4:Host", "1:1:200:0:1:4:host0:",
		"1:1:200:0:2:4:Host0:3:Age0:", // not sorted
		"1:-1:200:0:0:", "1:+1:200:0:0:", "1:1:200:-0:0:", "1:9223372036854775808:200:0:0:",
		"1:1:200:00:0:", "1:1: 200:0:0:",
	} {
		if r, err := decodeRecord(s); err == nil || !errors.Is(err, errRecord) {
			t.Errorf("decodeRecord(%q) = %+v, %v; want an error matching errRecord", s, r, err)
		}
	}
}

// FuzzDecodeRecord feeds the decoder any string: it never panics, and whatever it accepts
// encodes back to the same bytes (the encoding is canonical), so the commit script, which
// compares tokens as they are written, reads the token the record holds.
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range recordSamples {
		f.Add(string(r.encode()))
	}
	f.Add("1:1:200:0:0:")
	f.Add("1:9223372036854775807:999:3:abc2:4:Date3:now4:Date3:new")
	f.Add("1:1:200:99999999999999999999:")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := decodeRecord(s)
		if err != nil {
			return
		}
		if enc := string(r.encode()); enc != s {
			t.Fatalf("decodeRecord(%q) then encode gives %q", s, enc)
		}
		if r.token < 1 || r.status < 100 || r.status > 999 {
			t.Fatalf("decodeRecord(%q) accepted token %d, status %d", s, r.token, r.status)
		}
	})
}
