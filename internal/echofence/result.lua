-- fencekit: the result that won for an idempotency key, read by a request whose release found
-- its lock lost, so that its commit was not written (internal/echofence/idempotent.go; the
-- commit itself goes with the release, see internal/seam).
-- KEYS[1]: the record, "<prefix>{R}:idem"; KEYS[2]: the resource's fence counter,
-- "<prefix>{R}:fence" (both in the lock's Cluster slot).
-- ARGV[1]: the request's token, in decimal.
-- Returns {1} when the record is the request's own (a lost reply's release had committed it),
-- {0, record} when another request's record exists, {0} when none exists but a later
-- acquisition does (the counter is above the token: that request runs, and commits), and {2}
-- when neither: nothing was stored.
local token = ARGV[1]
local rec = redis.call('GET', KEYS[1])
if rec then
  if string.match(rec, '^1:([0-9]+):') == token then
    return {1}
  end
  return {0, rec}
end
-- Tokens are decimal strings without leading zeros: the longer is the larger, and of two of
-- the same length the later in byte order.
local fence = redis.call('GET', KEYS[2])
if fence and (#fence > #token or (#fence == #token and fence > token)) then
  return {0}
end
return {2}
