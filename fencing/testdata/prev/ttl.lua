local TAKEN, NOT_HELD = 1, 5
-- Report the remaining lease of one holder of a resource if this acquisition still holds it
-- (see doc.go for the lock's values).
-- KEYS[1]: the resource's lock key; on a Cluster its fence and queue keys follow, declared
--          only (see wire.Declare).
-- ARGV[1]: value: the lock value of this acquisition, "<owner>:<token>".
-- ARGV[2]: kind: 'x' (exclusive, the default), 's' or 'l<n>'.
-- Returns {TAKEN, left}, the lease left in milliseconds, or NOT_HELD when this acquisition no
-- longer holds the resource. An exclusive lock's value may carry the mark '+'.
if (ARGV[2] or 'x') == 'x' then
  local held = redis.pcall('GET', KEYS[1])
  if held == ARGV[1] or held == ARGV[1] .. '+' then
    return {TAKEN, redis.call('PTTL', KEYS[1])}
  end
  return NOT_HELD
end
local owner, token = string.match(ARGV[1], '^([^:]*):(%d+)$')
local h = owner and redis.pcall('HMGET', KEYS[1], owner, 't')
if not h or h.err or not h[1] or string.match(h[1], ':(%d+)$') ~= token then
  return NOT_HELD
end
-- The time: the hash's expiry t less its TTL.
local pttl = redis.call('PTTL', KEYS[1])
local left = tonumber(string.match(h[1], '^%d+')) - (tonumber(h[2]) - pttl)
if pttl < 0 or left <= 0 then
  return NOT_HELD
end
return {TAKEN, left}
