-- fencekit: commit of an idempotency record (internal/echofence/record.go), sent in the
-- pipeline of the key's lock release, just before the release script (internal/seam).
-- KEYS[1]: the record, "<prefix>{R}:idem"; KEYS[2]: the resource's fence counter,
-- "<prefix>{R}:fence" (both in the lock's Cluster slot).
-- ARGV[1]: the committing call's token, in decimal; ARGV[2]: the record; ARGV[3]: its TTL in
-- ms; ARGV[4]: '1' to write the record, '0' only to read the result that won (the call has
-- lost its lock); ARGV[5]: '1' when the Locker's tokens are floored at the server clock
-- (fencing.WithServerTimeFloor), so that the counter may expire with the record.
-- Returns {1} when the record is the call's: written now, or by an earlier run of this same
-- commit (go-redis sends the pipeline again after a lost reply), whose record carries the
-- call's token. Returns {0, record} when another call's record exists: it is never replaced.
-- Returns {0} when there is no record but a later acquisition exists (the fence counter is
-- above the token): that call runs, and commits. Returns {2} when there is neither and
-- ARGV[4] is '0': nothing is written.
local token = ARGV[1]
-- The key's counter serves this record alone: with tokens floored at the server clock, a
-- counter created again starts above every token before it, so unless it expires already
-- (WithCounterExpiry) it expires with the record, and counters do not pile up, one per key.
if ARGV[5] == '1' then
  redis.call('PEXPIRE', KEYS[2], ARGV[3], 'NX')
end
local rec = redis.call('GET', KEYS[1])
if rec then
  if string.match(rec, '^1:([0-9]+):') == token then
    return {1}
  end
  return {0, rec}
end
-- Tokens are decimal strings without leading zeros: the longer is the larger, and of two of
-- the same length the later in byte order. A counter that expired (WithCounterExpiry) has
-- seen no acquisition since: the token is still the current one.
local fence = redis.call('GET', KEYS[2])
if fence and (#fence > #token or (#fence == #token and fence > token)) then
  return {0}
end
if ARGV[4] ~= '1' then
  return {2}
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {1}
