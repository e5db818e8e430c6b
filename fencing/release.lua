-- Release a lock if this acquisition still owns it, and wake the resource's waiters.
-- KEYS[1]: the lock key.
-- ARGV[1]: the owner value followed by ':' (the lock value's prefix).
-- ARGV[2]: the release channel to PUBLISH on; "" publishes nothing.
-- Returns 1 when the lock was deleted, 0 when another owner (or nobody) holds it.
local held = redis.call('GET', KEYS[1])
if held and string.sub(held, 1, #ARGV[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= '' then
    redis.call('PUBLISH', ARGV[2], 'released')
  end
  return 1
end
return 0
