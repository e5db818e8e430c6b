// Package middleware runs Echo v5 handlers under a fenced Redis lock: one request at a time
// per resource, with the lock's fencing token in the request's context. It is the Echo v5
// twin of [github.com/fencekit/fencekit/middleware], which serves Echo v4: the same API, the
// same lock names, responses and defaults, from one implementation shared by both.
//
// Import it under the alias the v4 package uses:
//
//	import fencemw "github.com/fencekit/fencekit/middleware-v5"
//
// # Why "middleware-v5"
//
// Integrations that keep both Echo majors side by side put the major in the directory and
// keep the package name: New Relic's go-agent ships integrations/nrecho-v4 and nrecho-v5, both
// package nrecho, and oapi-codegen's runtime moved its v5 adapter from
// strictmiddleware/echo/v5 (package v5) to strictmiddleware/echo-v5 (package echo). This
// package follows them: its name stays middleware, so the alias fencemw and every
// identifier stay, and moving a service from v4 to v5 changes the import path, not the code
// that calls fencemw. The other precedents fit a library with more than Echo in it less
// well: echo-contrib and echo-jwt publish a /v5 module, which ties the library's major
// version to Echo's, and slog-echo switched its package to v5 in place, reverted the same
// day and moved to a /v2 module. Both packages live in fencekit's one module, whose go line
// (1.26) is above what Echo v5 needs (1.25), so neither major raises it for the other.
//
// # What a request goes through
//
// For every request the [Config.Skipper] does not skip, the middleware
//
//  1. extracts a key from the request (a path parameter by default; see [Config.KeyLookup]
//     and [Config.KeyExtractor]) and validates it;
//  2. names the resource after the route and the key, "<route> <key>" (PUT /orders/42 on
//     route "/orders/:id" locks "/orders/:id 42"; the route is c.Path(), which is
//     c.RouteInfo().Path), or "<namespace>:<key>" when [Config.Namespace] is set, so a value
//     the client controls cannot name the lock of another kind of resource;
//  3. takes the lock with [fencing.Locker.Do], trying once unless [Config.MaxWait] allows
//     it to wait;
//  4. runs the handler with the token in the request's context ([fencing.TokenFromContext]
//     or [TokenFromEcho]), in the Echo context under [Config.ContextKey], and, when
//     [Config.TokenHeader] is set, in a response header;
//  5. renews the lease while the handler runs and cancels the request's context, with a
//     cause matching [fencing.ErrNotHeld], if the lock is lost;
//  6. releases the lock when the handler returns, returns an error, or panics, and when
//     the client goes away.
//
// With [Config.KeysExtractor], a request names several keys, such as both accounts of a
// transfer: the middleware locks all their resources together with [fencing.Locker.DoAll],
// deadlock-free whatever their order, each with its own token ([fencing.TokenFor]; the Echo
// context then holds a map[string]int64 under [Config.ContextKey]).
//
// # Responses
//
//	Situation                                  Status                     Handler
//	no key, or an invalid one (no lock taken)  400 Bad Request            Config.ErrorHandler
//	resource name over fencing.MaxResourceLen  400 Bad Request            Config.ErrorHandler
//	resource busy (after MaxWait, if any)      423 Locked + Retry-After   Config.DenyHandler
//	Redis unreachable, Locker closed           503 Service Unavailable    Config.ErrorHandler
//	Locker refuses the call's options          500 Internal Server Error  Config.ErrorHandler
//	handler lost the lock and returned an      503 Service Unavailable    Config.LostHandler
//	error matching store.ErrStaleToken or      + Retry-After: 1
//	fencing.ErrNotHeld (nothing written)
//	handler returned another error             the handler's error, unchanged
//	handler panicked                           the panic goes on to Echo's Recover
//	skipped request                            the handler runs without a lock
//
// Retry-After is the holder's remaining lease rounded up to whole seconds, at least 1; the
// middleware sets it before calling the DenyHandler, so a DenyHandler that answers 409
// instead keeps it. A handler whose write a fenced store refused (store.ErrStaleToken) or
// whose context ended with a lost lock (return context.Cause(ctx), which matches
// fencing.ErrNotHeld) may return that error as it is, wrapped or not: unless it wrote a
// response or its error carries a status of its own, the middleware answers 503 with
// Retry-After: 1 ([DefaultLostHandler]), which a client retries and [Idempotent] does not
// keep. The middleware returns its errors to Echo, which hands them to
// e.HTTPErrorHandler (func(c *echo.Context, err error)). The errors built by [NewHTTPError],
// which the default handlers return, carry their status as Echo v5 expects
// (echo.StatusCode(err), echo.ResolveResponseStatus) and their cause for logs, errors.Is and
// errors.As, and they format themselves: for a busy resource, Echo's DefaultHTTPErrorHandler
// answers {"message":"order:42 is busy"} (the resource as the middleware names it) and
// ProblemDetailsHTTPErrorHandler a problem with that message as its detail, even when told
// to expose errors; [NewHTTPErrorMessage] puts a message of your own, such as "payout 42 is
// being processed", in its place. With the default handlers, Redis key names and addresses,
// lock values and the causes' texts never reach a client.
//
// # Registration
//
// Register the middleware with e.Use, g.Use or on a route, never with e.Pre: path
// parameters and the route are only known after routing. Register it after Echo's Recover
// middleware (so Recover is outside it): a panic in the handler releases the lock and then
// continues up to Recover. A route added with e.Any matches every method under one route,
// so every method of it shares its locks, as the eleven routes v4's Any adds do. g.Use
// makes Echo route a group's unknown paths to catch-all routes (unless
// echo.Config.NoGroupAutoRegister404Routes is set) that run the group's middleware; such a
// request has no key and is answered 400 rather than 404. Registering per route avoids
// this.
//
// A middleware nested inside another for the same resource and Locker (say, on a group and
// on one of its routes) does not take the lock twice: it runs the handler under the outer
// lock and token.
//
// # Idempotent requests
//
// [Idempotent] serves the Idempotency-Key header of the IETF draft
// (draft-ietf-httpapi-idempotency-key-header), as payment APIs do: the first request with a
// key runs and its response is stored under the key; a retry with the key gets the stored
// response again, byte for byte, marked Idempotent-Replayed: true, without running the handler
// (one Redis round trip, no lock); a retry while the first still runs gets 409 Conflict with
// Retry-After (or waits, with [IdempotencyConfig.MaxWait]); the same key with another request
// (method, route, path values or body: the fingerprint) gets 422; a missing key on a Required
// route, or an invalid one, 400; a body over MaxBody, 413. Error bodies are RFC 9457 problem
// documents ([DefaultIdempotencyErrorHandler]).
//
// The result is fenced: the key's resource is locked with a fencing lock, the handler runs
// under it, and the record is committed, in the round trip of the lock's release, only while
// the request's token is the key's current one. An attempt that stalled past its lease
// ([IdempotencyConfig.LockTTL], 10s by default, renewed while the handler runs; retries are
// answered 409 until it lapses) cannot overwrite its successor's result; its commit is refused and its client gets the result that
// was stored, so every client of a key sees one response. The handler itself may then have
// run twice (at least once under a stall, as with any lease): lock what it changes inside,
// with the Fence middleware (idempotency outside, the account's lock inside), and write
// through a store that checks that lock's token.
//
// What is not stored lets a retry run the handler again: a status [IdempotencyConfig.Keep]
// refuses (5xx by default, the Fence middleware's 503 for a lost lock included), a handler's error matching [fencing.ErrNotAcquired] (a busy lock
// inside, such as the Fence middleware's 423), the result of a request whose lock was lost,
// and a response larger than MaxBody or flushed, which is streamed rather than held. Each key
// names a lock with a fence counter: give the middleware a Locker with
// [fencing.WithCounterExpiry]. docs/echo.md, "Idempotent requests", has the whole story.
//
// # Limits
//
// A lease can lapse while the handler runs (a long pause, a partition, an unreachable
// Redis): the request's context is then cancelled, but a write already in flight may still
// land. The store written to must check the fencing token and refuse tokens lower than the
// highest it has seen; the lock alone does not make writes safe. The middleware does not
// change the handler's result when the lock is lost after the handler succeeded, nor when
// the release fails: the Locker's hooks ([fencing.WithHooks]) report both.
//
// Every distinct resource name leaves a fence counter in Redis, forever unless the Locker
// has [fencing.WithCounterExpiry]; docs/echo.md, "Endpoints that take untrusted names", gives
// the configuration for keys a client chooses, with its measured bound.
package middleware
