package echofence

import (
	"bytes"
	"maps"
	"net/http"
)

// capture is the response a handler writes under the idempotency middleware: its status,
// headers and body are kept, up to limit bytes of body, so that the middleware can store
// them and then send either them or another request's stored result. A body over the limit,
// or a Flush, makes it stream instead: what was kept is sent to the client's response and
// the rest passes straight through; such a response is not stored.
type capture struct {
	client   http.ResponseWriter
	header   http.Header
	status   int
	body     bytes.Buffer
	limit    int64
	streamed bool
}

// newCapture returns a capture whose header starts as a copy of the client's (set by the
// middlewares outside).
func newCapture(client http.ResponseWriter, limit int64) *capture {
	return &capture{client: client, header: client.Header().Clone(), limit: limit}
}

func (w *capture) Header() http.Header { return w.header }

func (w *capture) WriteHeader(code int) {
	if w.streamed {
		w.client.WriteHeader(code)
		return
	}
	if w.status == 0 {
		w.status = code
	}
}

func (w *capture) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if !w.streamed && int64(w.body.Len()+len(p)) > w.limit {
		w.stream()
	}
	if w.streamed {
		return w.client.Write(p)
	}
	return w.body.Write(p)
}

// Flush sends what was written so far and streams the rest: a flushed response is not
// stored.
func (w *capture) Flush() {
	w.stream()
	_ = http.NewResponseController(w.client).Flush()
}

// written reports whether the handler wrote a status or a body.
func (w *capture) written() bool { return w.status != 0 }

// code returns the status; 200 when the handler wrote nothing, as net/http would answer.
func (w *capture) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// stream sends the status, headers and body kept so far to the client's response; from then
// on every write goes there.
func (w *capture) stream() {
	if w.streamed {
		return
	}
	w.streamed = true
	w.send(w.client)
	w.body.Reset()
}

// send writes the kept response to dst, its headers replacing dst's.
func (w *capture) send(dst http.ResponseWriter) {
	h := dst.Header()
	clear(h)
	maps.Copy(h, w.header)
	dst.WriteHeader(w.code())
	if w.body.Len() > 0 {
		_, _ = dst.Write(w.body.Bytes())
	}
}
