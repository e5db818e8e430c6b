// Package label fits an identifier the adapters label an acquisition with (an Asynq task's
// ID, an HTTP request's ID) to what fencing.WithLabel accepts: at most fencing.MaxLabelLen
// bytes of UTF-8 without control characters. An identifier comes from outside (a task
// enqueued with asynq.TaskID, a client's X-Request-Id header), so the adapters fit it rather
// than fail the work it labels.
package label

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/fencekit/fencekit/fencing"
)

// Elision joins the start and the end of an identifier too long to be a label.
const Elision = "…"

// Fit returns id as a valid label. A byte that is not UTF-8 and a control character become
// '?'. An identifier longer than fencing.MaxLabelLen bytes keeps its start and its end,
// whole characters only, joined by [Elision], at most fencing.MaxLabelLen bytes in all: the
// end of an ID often tells it apart (the tick of an asynqfence.Scheduler's task,
// "asynqfence:<name>:<entry>:<tick>"), its start says what it is.
func Fit(id string) string {
	if !utf8.ValidString(id) || strings.IndexFunc(id, unicode.IsControl) >= 0 {
		id = strings.Map(func(r rune) rune {
			if r == utf8.RuneError || unicode.IsControl(r) {
				return '?'
			}
			return r
		}, strings.ToValidUTF8(id, "\uFFFD"))
	}
	if len(id) <= fencing.MaxLabelLen {
		return id
	}
	room := fencing.MaxLabelLen - len(Elision)
	head, tail := id[:room/2], id[len(id)-(room-room/2):]
	for len(head) > 0 && !utf8.ValidString(head) {
		head = head[:len(head)-1] // a character cut at its end
	}
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:] // a character cut at its start
	}
	return head + Elision + tail
}
