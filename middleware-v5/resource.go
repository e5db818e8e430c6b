package middleware

// Defaults and limits, the same for both Echo majors (TestBehaviour/Constants).
const (
	// DefaultKeyLookup is where the key is found when [Config.KeyLookup] is empty: the path
	// parameter "id".
	DefaultKeyLookup = "param:id"
	// DefaultContextKey is the key under which the token is stored in the Echo context when
	// [Config.ContextKey] is empty.
	DefaultContextKey = "fencing.token"
	// MaxKeyLen is the longest key, in bytes, that a request may give; a longer one is answered
	// 400. The whole resource name, namespace included, must also fit in
	// [fencing.MaxResourceLen]; a longer one is answered 400 too, and nothing is written to
	// Redis.
	MaxKeyLen = 1024
)
