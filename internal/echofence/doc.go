// Package echofence is the behaviour of fencekit's Echo middleware, written once for every
// Echo major: resource naming and key checks, the key lookup, re-entry, running the handler
// under [fencing.Locker.Do], the Retry-After header, which status answers which failure, and
// the defaults of the configuration.
//
// An adapter package (middleware for Echo v4, middleware-v5 for Echo v5) supplies only what
// differs between the majors: its context type, which satisfies [Context] as it is, and a
// [Glue] value with the response header, Echo's key extractors and the HTTP errors of that
// major. Its public Config converts to [Settings] with a plain conversion, so the two
// packages cannot drift apart field by field.
package echofence
