package tracing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/fencekit/fencekit/fencing"
)

// Attribute keys. They are listed, with their meaning, in the package documentation.
const (
	keyResource      = attribute.Key("fencing.resource")
	keyResourceHash  = attribute.Key("fencing.resource.hash")
	keyOperation     = attribute.Key("fencing.operation")
	keyResourceCount = attribute.Key("fencing.resource.count")
	keyOutcome       = attribute.Key("fencing.outcome")
	keyToken         = attribute.Key("fencing.token")
	keyAttempts      = attribute.Key("fencing.attempts")
	keyWait          = attribute.Key("fencing.wait.duration")
	keyHold          = attribute.Key("fencing.hold.duration")
	keyLost          = attribute.Key("fencing.lost")
	keyLabel         = attribute.Key("fencing.label")
	keyErrorType     = semconv.ErrorTypeKey
)

// resourceID returns the attribute that identifies resource under mode, and false when the
// mode records none.
func resourceID(mode ResourceMode, resource string) (attribute.KeyValue, bool) {
	switch mode {
	case ResourceOn:
		return keyResource.String(resource), true
	case ResourceHashed:
		return keyResourceHash.String(hashResource(resource)), true
	}
	return attribute.KeyValue{}, false
}

// hashResource returns the first 16 hex digits of the SHA-256 of resource.
func hashResource(resource string) string {
	sum := sha256.Sum256([]byte(resource))
	return hex.EncodeToString(sum[:8])
}

// description returns err's message for a span status. Outside ResourceOn, the quoted
// resource name the core puts in its messages is replaced by the hash or by "[redacted]".
func description(mode ResourceMode, resource string, err error) string {
	msg := err.Error()
	if mode == ResourceOn {
		return msg
	}
	with := `"[redacted]"`
	if mode == ResourceHashed {
		with = strconv.Quote(hashResource(resource))
	}
	return strings.ReplaceAll(msg, strconv.Quote(resource), with)
}

// The error.type values. They are stable: dashboards and alerts may match them.
const (
	errTimeout       = "timeout"        // the context's deadline passed
	errCancelled     = "cancelled"      // the context was cancelled
	errNotHeld       = "not_held"       // fencing.ErrNotHeld: the lock was no longer ours
	errClosed        = "closed"         // fencing.ErrClosed
	errInvalid       = "invalid"        // fencing.ErrInvalid
	errNotReplicated = "not_replicated" // fencing.ErrNotReplicated
	errRedis         = "redis"          // anything else: Redis unreachable or failing
	errWork          = "work"           // the end of a term of Lead: its fn failed
)

// errorType classifies err for the error.type attribute.
func errorType(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return errTimeout
	case errors.Is(err, context.Canceled):
		return errCancelled
	case errors.Is(err, fencing.ErrNotHeld):
		return errNotHeld
	case errors.Is(err, fencing.ErrClosed):
		return errClosed
	case errors.Is(err, fencing.ErrInvalid):
		return errInvalid
	case errors.Is(err, fencing.ErrNotReplicated):
		return errNotReplicated
	}
	return errRedis
}
