package echofence

import (
	"context"
	"errors"
	"strconv"

	"github.com/fencekit/fencekit/fencing"
)

// resources returns the names of the request's locks with KeysExtractor, deduplicated in the
// order the keys came, or an error wrapping fencing.ErrInvalid when the request has no valid
// key, a name would be too long, or there are more than fencing.MaxResources.
func (f *Fence[C]) resources(c C) ([]string, error) {
	keys, err := f.extractAll(c)
	if err != nil {
		return nil, &ownError{msg: "resource keys", cause: err, is: []error{fencing.ErrInvalid}}
	}
	if len(keys) == 0 {
		return nil, invalidf("no resource key")
	}
	names := make([]string, 0, len(keys))
	seen := make(map[string]bool, len(keys))
	for _, key := range keys {
		if err := ValidKey(key); err != nil {
			return nil, err
		}
		var name string
		if f.namespace == "" {
			name = RouteName(c.Path(), key)
		} else {
			name = Qualify(f.namespace, key)
		}
		if len(name) > fencing.MaxResourceLen {
			return nil, invalidf("resource name of %d bytes exceeds %d", len(name), fencing.MaxResourceLen)
		}
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	if len(names) > fencing.MaxResources {
		return nil, invalidf("%d resources exceed %d", len(names), fencing.MaxResources)
	}
	return names, nil
}

// serveAll is Serve with KeysExtractor: the request's resources are locked together through
// Locker.DoAll, and next runs inside it.
func (f *Fence[C]) serveAll(c C, next func(c C) error) error {
	names, err := f.resources(c)
	if err != nil {
		return f.errorHandler(c, err)
	}
	req := c.Request()
	// Locks an outer middleware holds for the request are used as they are; DoAll takes the
	// others (taking a held one again would wait for the request itself).
	tokens := make(map[string]int64, len(names))
	var take []string
	for _, name := range names {
		if token, ok := heldToken(req.Context(), f.locker, name); ok {
			tokens[name] = token
		} else {
			take = append(take, name)
		}
	}
	if len(take) == 0 {
		f.exposeAll(c, names, tokens)
		return next(c)
	}
	var (
		ran    bool
		result error
	)
	err = f.locker.DoAll(req.Context(), take, func(ctx context.Context) error {
		ran = true
		for _, name := range take {
			tokens[name], _ = fencing.TokenFor(ctx, name)
		}
		f.exposeAll(c, names, tokens)
		for _, name := range take {
			ctx = withHeld(ctx, f.locker, name, tokens[name])
		}
		c.SetRequest(req.WithContext(ctx))
		defer c.SetRequest(req)
		result = next(c)
		return result
	}, labelled(RequestLabel(c, f.label, f.header), f.opts)...)
	switch {
	case ran:
		// Neither error says which lock was lost: the LostHandler gets the first resource.
		return f.answer(c, names[0], result)
	case errors.Is(err, fencing.ErrNotAcquired):
		f.header(c).Set(HeaderRetryAfter, RetryAfter(err))
		busy := take[0]
		if b := (*fencing.BusyError)(nil); errors.As(err, &b) {
			busy = b.Resource
		}
		return f.denyHandler(c, busy, err)
	case errors.Is(err, fencing.ErrInvalid):
		err = setupErr(err)
	}
	return f.errorHandler(c, err)
}

// exposeAll makes the tokens available to the handler: c.Get gives the map, and the response
// header one "name=token" value per resource, in names' order.
func (f *Fence[C]) exposeAll(c C, names []string, tokens map[string]int64) {
	c.Set(f.contextKey, tokens)
	if f.tokenHeader != "" {
		h := f.header(c)
		h.Del(f.tokenHeader)
		for _, name := range names {
			h.Add(f.tokenHeader, name+"="+strconv.FormatInt(tokens[name], 10))
		}
	}
}
