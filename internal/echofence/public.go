package echofence

import (
	"encoding/json"
	"net/http"
)

// Public is what a client may see of an error the adapters build: its status and a message
// written for the client, never the text of the error it wraps. Both majors' NewHTTPError
// errors carry one; Echo's error handlers send it as the body (it marshals itself), and Echo
// v5's ProblemDetailsHTTPErrorHandler reads it through the error's ProblemError method.
type Public struct {
	Status int
	// Message says what happened, for the client; "" means the status text.
	Message string
	// Problem makes the body an RFC 9457 problem document ({"type", "title", "status",
	// "detail"}) instead of Echo's {"message": ...}.
	Problem bool
}

// Text returns the message, or the status text when there is none.
func (p Public) Text() string {
	if p.Message != "" {
		return p.Message
	}
	return http.StatusText(p.Status)
}

// String returns Text, so that an *echo.HTTPError holding p prints its message.
func (p Public) String() string { return p.Text() }

// MarshalJSON returns {"message":"<text>"}, or with Problem the problem document: type
// "about:blank", the status text as title, the status, and the message, if any, as detail.
func (p Public) MarshalJSON() ([]byte, error) {
	if !p.Problem {
		return json.Marshal(struct {
			Message string `json:"message"`
		}{p.Text()})
	}
	return json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail,omitempty"`
	}{"about:blank", http.StatusText(p.Status), p.Status, p.Message})
}

// ContentTypeProblem is the media type of an RFC 9457 problem document.
const ContentTypeProblem = "application/problem+json"
