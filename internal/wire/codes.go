package wire

import (
	"strconv"
	"strings"
	"time"
)

// The reply codes of the scripts, one numbering for all of them (each script's header says
// which it returns): the first element of an array reply, or the whole reply.
const (
	Busy     = 0 // busy: {Busy, left}; from the poll script {Busy, held, left}
	Taken    = 1 // taken, or still held: {Taken, token, behind}; Extend's Taken; TTL's {Taken, left}
	Granted  = 2 // granted to waiters of the caller's Locker: {Granted, element, token, ...}
	Queued   = 3 // the waiter's element is in the queue: {Queued, held}
	Released = 4 // released, nothing granted to the caller's Locker
	NotHeld  = 5 // this acquisition does not hold the resource
	Mismatch = 6 // the live holders are of a kind this call cannot join: {Mismatch, kind}
	Layout   = 7 // the lock is a hash of the earlier layout: {Layout}
	Memoed   = 8 // the memo the call names exists: {Memoed, value}
)

const (
	// EntryTTL is how long a waiter key and the queue outlive their last renewal.
	EntryTTL = 3 * time.Second
	// RecordTTL is how long Redis keeps the outcome of a release, for a call sent again
	// after a lost reply.
	RecordTTL = 10 * time.Second
	// hashMeta is the number of a hash's fields that are not holders: k, q, e, x, t.
	hashMeta = 5
)

// constants are the Lua locals a script may start with: the constants above (the lifetimes as
// strings, which Redis takes as they are, where a Lua number would be formatted on every
// call).
var constants = []struct{ name, value string }{
	{"BUSY", strconv.Itoa(Busy)}, {"TAKEN", strconv.Itoa(Taken)}, {"GRANTED", strconv.Itoa(Granted)},
	{"QUEUED", strconv.Itoa(Queued)}, {"RELEASED", strconv.Itoa(Released)}, {"NOT_HELD", strconv.Itoa(NotHeld)},
	{"MISMATCH", strconv.Itoa(Mismatch)}, {"LAYOUT", strconv.Itoa(Layout)}, {"MEMO", strconv.Itoa(Memoed)},
	{"META", strconv.Itoa(hashMeta)},
	{"ENTRY_TTL", "'" + strconv.FormatInt(EntryTTL.Milliseconds(), 10) + "'"},
	{"RECORD_TTL", "'" + strconv.FormatInt(RecordTTL.Milliseconds(), 10) + "'"},
}

// header returns the line a script whose text is body starts with: the constants it names,
// and only those (each costs the script a step on every call).
func header(body string) string {
	var names, values []string
	for _, c := range constants {
		if strings.Contains(body, c.name) {
			names, values = append(names, c.name), append(values, c.value)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return "local " + strings.Join(names, ", ") + " = " + strings.Join(values, ", ") + "\n"
}
