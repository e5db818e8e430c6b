// Package dashboard is an operators' page of the fenced locks of a [fencing.Locker]: an
// [http.Handler] that a service mounts beside its own routes, which shows who holds what,
// with each holder's and waiter's label ([fencing.WithLabel]), and frees a stuck lock. It
// needs no handler code of the service's, no front-end build and nothing from elsewhere:
// server-rendered pages (html/template, embedded), one stylesheet and one small script.
//
// # Mounting
//
// The Handler's routes are relative: mount it under a path that ends in "/" and strip that
// path, with net/http,
//
//	mux.Handle("/admin/locks/", http.StripPrefix("/admin/locks", dashboard.New(locker)))
//
// with Echo v4 or v5, through echo.WrapHandler, behind the group's own middleware:
//
//	admin := e.Group("/admin", adminAuth) // the service's own access control
//	page := echo.WrapHandler(http.StripPrefix("/admin/locks", dashboard.New(locker)))
//	admin.Any("/locks", page)
//	admin.Any("/locks/*", page)
//
// A request for the mount point without its slash ("/admin/locks") is redirected to it
// ("/admin/locks/"), so that the pages' relative links resolve (a ServeMux does it itself;
// Echo's route "/locks/*" does not match "/admin/locks", hence the route "/locks"). The Handler has no access
// control of its own: the service's middleware guards it, as it guards any admin route.
//
// # Routes
//
//	GET  /                    the list of locks: a page of the lock keys found with SCAN
//	                          (?cursor= for the next page, ?match=GLOB to filter names)
//	GET  /lock?resource=NAME  one resource: holders, waiters, next token, counter
//	POST /release             force release (form fields resource, token); 303 to /lock
//	GET  /api/locks           the list as JSON (same query)
//	GET  /api/lock?resource=  the resource as JSON
//	POST /api/release         force release, answered with JSON
//	GET  /style.css, /refresh.js
//
// Each lock shows its resource, its mode (exclusive, shared, limit n, free when only
// waiters are queued), each holder's token, label and lease left, each waiter's label, kind
// and time waited (and whether its process still waits), and the next token. Both pages
// read Redis again on their own ([WithRefresh]; the script replaces the page's data in
// place, or without scripts the page reloads).
//
// # JSON
//
// The JSON forms carry what the pages show, times in milliseconds: a lock is
//
//	{"resource": "order-42", "mode": "exclusive",
//	 "holders": [{"token": 7, "label": "export-42", "owner": "…", "ttl_ms": 29731}],
//	 "waiters": [{"label": "retry-7", "locker": "…", "mode": "exclusive", "alive": true,
//	              "waiting_ms": 1520, "time_floor": false, "counter_expiry_ms": 0}],
//	 "next_token": 8, "counter_ttl_ms": 0}
//
// /api/locks answers {"locks": [...], "match": "*", "next": "CURSOR", "skipped": [...]},
// next being "" after the last page; errors are answered {"error": "..."} with their status.
//
// # Paging
//
// A page is read with SCAN (never KEYS) under the Locker's prefix, on the client's server,
// on every primary of a *redis.ClusterClient one after the other, or on every shard of a
// *redis.Ring, until it holds the page size ([WithPageSize]) or a few more (a SCAN reply is
// not split), and each resource found is read with [fencing.Locker.Inspect]. The cursor of
// the next page is opaque: it holds SCAN's cursor on one server. A listing has SCAN's
// guarantees: a lock held from the first page to the last is listed, at least once; a lock
// taken or released meanwhile may or may not be. Locks are sorted by name within a page, not
// across pages. A cursor made before the Cluster's primaries changed is answered 409
// Conflict: the listing starts again. A page of a large keyspace with few locks can hold
// fewer locks than the page size, even none, and still have a next page: a page stops after
// SCAN has gone through about 100,000 keys.
//
// # Force release
//
// [fencing.Locker.ForceRelease] frees the holder with the token posted, as that holder's
// own Release would: the waiters queued get the resource at once, with higher tokens, and the
// old holder's Release and Extend fail with [fencing.ErrNotHeld]. The holder is not told and
// may still be working: a force release is safe for data only where the store checks
// fencing tokens, which refuses the old holder's later writes. A holder gone meanwhile is
// answered 409 Conflict, and nothing is released. Force release is POST only (405 Method
// Not Allowed otherwise), refused from other sites' pages by [http.CrossOriginProtection]
// (403 Forbidden; [WithTrustedOrigins] admits more origins), and turned off by [ReadOnly].
// The pages forbid framing (Content-Security-Policy frame-ancestors 'none'), so that another
// site cannot trick a click on the button.
//
// Errors are answered with a status: 400 for a bad request (no resource, an invalid name, a
// bad token or cursor), 404 for a resource that [WithMatch] excludes, 503 when Redis fails.
// A Handler is safe for concurrent use; it starts no goroutine that outlives a request.
package dashboard
