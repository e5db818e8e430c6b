package middleware

import "github.com/fencekit/fencekit/internal/echofence"

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
	// [fencing.MaxResourceLen].
	MaxKeyLen = 1024
)

// ResourceName returns the name of the lock that the middleware takes, with
// [Config.Namespace] set to namespace, for a request whose key is key: "<namespace>:<key>",
// with any ':' or '%' in namespace, and a '/' that starts it, percent-encoded, so two
// different (namespace, key) pairs never give one name. Lock the same name from other code
// (a transfer that locks two accounts, an Asynq task) to exclude the requests the
// middleware locks:
//
//	locker.Do(ctx, fencemw.ResourceName("account", "a1"), work)
//
// It only names: the middleware also refuses, with a 400, a key that is empty, longer
// than [MaxKeyLen] or holds invalid UTF-8 or control characters, and a name longer than
// [fencing.MaxResourceLen]. An empty namespace gives ":<key>", which the middleware never
// locks (an empty Namespace selects [RouteResourceName]).
func ResourceName(namespace, key string) string {
	return echofence.Qualify(namespace, key)
}

// RouteResourceName returns the name of the lock that the middleware takes, with an empty
// [Config.Namespace] (the default), for a request to the route registered as route (c.Path(),
// such as "/orders/:id") whose key is key: "<route> <key>", with any '%' or ' ' in route
// percent-encoded, and a '/' put in front of a route that does not start with one.
// RouteResourceName("/orders/:id", "42") is "/orders/:id 42", which no [ResourceName] name
// equals. The key checks of [ResourceName] apply too.
func RouteResourceName(route, key string) string {
	return echofence.RouteName(route, key)
}
