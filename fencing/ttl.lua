-- Report a lock's remaining TTL if this acquisition still owns it.
-- KEYS[1]: the lock key.
-- ARGV[1]: the owner value followed by ':' (the lock value's prefix).
-- Returns the remaining TTL in milliseconds, or -3 when another owner (or nobody) holds it.
local held = redis.call('GET', KEYS[1])
if held and string.sub(held, 1, #ARGV[1]) == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
return -3
