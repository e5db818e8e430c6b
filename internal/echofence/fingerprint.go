package echofence

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"io"
	"net/http"
	"strconv"

	"github.com/fencekit/fencekit/fencing"
)

// bufferBody reads the request's body, at most limit bytes, and puts it back as a reader of
// those bytes, so that the fingerprint and the handler both read all of it. A body over the
// limit returns an error matching ErrBodyTooLarge (413), one that cannot be read an error
// matching fencing.ErrInvalid (400).
func bufferBody(req *http.Request, limit int64) error {
	tooLarge := func() error {
		return idemErr(http.StatusRequestEntityTooLarge, "The request body is larger than "+strconv.FormatInt(limit, 10)+" bytes.",
			&ownError{msg: "body over " + strconv.FormatInt(limit, 10) + " bytes", is: []error{ErrBodyTooLarge}})
	}
	if req.ContentLength > limit {
		return tooLarge()
	}
	if req.Body == nil || req.Body == http.NoBody {
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
	switch {
	case err != nil:
		return idemErr(http.StatusBadRequest, "The request body could not be read.",
			&ownError{msg: "reading the body", cause: err, is: []error{fencing.ErrInvalid}})
	case int64(len(body)) > limit:
		return tooLarge()
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	return nil
}

// Fingerprint returns the default fingerprint of a request: the SHA-256, in hex, of its
// method, route (c.Path()), path values (names and values, from pathValues) and body, each
// length-prefixed so that no two requests share their input. It reads the body and puts it
// back for the handler (the middleware has buffered it already, within MaxBody). The query
// string and the headers are not part of it.
func Fingerprint[C Context](c C, pathValues func(c C) []string) (string, error) {
	req := c.Request()
	h := sha256.New()
	field(h, "fencekit idempotency v1")
	field(h, req.Method)
	field(h, c.Path())
	values := pathValues(c)
	field(h, strconv.Itoa(len(values)))
	for _, v := range values {
		field(h, v)
	}
	if req.Body != nil && req.Body != http.NoBody {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return "", &ownError{msg: "reading the body", cause: err}
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		h.Write(body) // last: needs no length
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// field writes s to h after its length.
func field(h hash.Hash, s string) {
	h.Write(binary.AppendUvarint(nil, uint64(len(s))))
	io.WriteString(h, s)
}
