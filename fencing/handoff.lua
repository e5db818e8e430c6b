-- Release a lock and, when no other Locker listens for the resource's releases, hand it to
-- the releasing Locker's next waiter in the same step: one round trip instead of a release
-- and then the waiter's acquire.
-- KEYS[1]: the lock key.
-- KEYS[2]: the fence key.
-- ARGV[1]: the releasing owner value followed by ':' (the lock value's prefix).
-- ARGV[2]: the release channel; the releasing Locker's own subscription to it is confirmed.
-- ARGV[3]: the release message: the releasing Locker's id.
-- ARGV[4]: the waiter's owner value, random and unique per acquisition, without ':'.
-- ARGV[5]: the waiter's lease length in milliseconds (a positive integer).
-- Returns 0 when another owner (or nobody) holds the lock. Returns {2, token} when it handed
-- the lock to ARGV[4] with a new token (a string, as in acquire.lua). Otherwise it deleted the
-- lock and returns {1, n}: n subscribers received the release message.
local held = redis.call('GET', KEYS[1])
if not held or string.sub(held, 1, #ARGV[1]) ~= ARGV[1] then
  return 0
end
-- The releasing Locker is subscribed, so one listener is itself. With more, waiters of other
-- Lockers (processes) are waiting too: release and let the message wake them instead.
if redis.call('PUBSUB', 'NUMSUB', ARGV[2])[2] <= 1 then
  -- As in acquire.lua, the counter moves before the lock changes hands; a failing INCR (at the
  -- int64 maximum) falls back to a plain release.
  local n = redis.pcall('INCR', KEYS[2])
  if type(n) == 'number' then
    local token = redis.call('GET', KEYS[2])
    redis.call('SET', KEYS[1], ARGV[4] .. ':' .. token, 'PX', ARGV[5])
    return {2, token}
  end
end
redis.call('DEL', KEYS[1])
return {1, redis.call('PUBLISH', ARGV[2], ARGV[3])}
