-- Report a lock's remaining TTL if this acquisition still holds it.
-- KEYS[1]: the lock key.
-- ARGV[1]: the lock value of this acquisition, "<owner>:<token>".
-- Returns the remaining TTL in milliseconds, or -3 when another owner (or nobody) holds it.
-- The value may carry the mark '+' (waiters queued, see grant.lua).
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] or held == ARGV[1] .. '+' then
  return redis.call('PTTL', KEYS[1])
end
return -3
