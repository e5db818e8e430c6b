package middleware

import "github.com/fencekit/fencekit/internal/echofence"

// Defaults and limits.
const (
	// DefaultKeyLookup is where the key is found when [Config.KeyLookup] is empty: the path
	// parameter "id".
	DefaultKeyLookup = echofence.DefaultKeyLookup
	// DefaultContextKey is the key under which the token is stored in the Echo context when
	// [Config.ContextKey] is empty.
	DefaultContextKey = echofence.DefaultContextKey
	// MaxKeyLen is the longest key, in bytes, that a request may give; a longer one is answered
	// 400. The whole resource name, namespace included, must also fit in
	// [fencing.MaxResourceLen]; a longer one is answered 400 too, and nothing is written to
	// Redis.
	MaxKeyLen = echofence.MaxKeyLen
)
