package echofence

import (
	"net/http"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/label"
)

// HeaderXRequestID is the header of a request's ID: echo.HeaderXRequestID of both majors,
// which Echo's RequestID middleware sets on the response (from the request's header, or a
// new ID).
const HeaderXRequestID = "X-Request-Id"

// RequestLabel returns the label of c's locks: labelOf's result when labelOf is not nil,
// otherwise the request's ID, the X-Request-Id header of c's response (header(c)), or else of
// its request; fitted to a label (internal/label), "" for none.
func RequestLabel[C Context](c C, labelOf func(c C) string, header func(c C) http.Header) string {
	if labelOf != nil {
		return label.Fit(labelOf(c))
	}
	id := header(c).Get(HeaderXRequestID)
	if id == "" {
		id = c.Request().Header.Get(HeaderXRequestID)
	}
	return label.Fit(id)
}

// labelled returns opts after fencing.WithLabel(label), or opts itself when label is "".
func labelled(label string, opts []fencing.CallOption) []fencing.CallOption {
	if label == "" {
		return opts
	}
	return append([]fencing.CallOption{fencing.WithLabel(label)}, opts...)
}
