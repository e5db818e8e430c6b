-- Release a lock if this acquisition still owns it, and wake the resource's waiters.
-- KEYS[1]: the lock key.
-- ARGV[1]: the owner value followed by ':' (the lock value's prefix).
-- ARGV[2]: the release channel to PUBLISH on; "" publishes nothing.
-- ARGV[3]: the message: the releasing Locker's id, so that it can ignore its own releases.
-- Returns 0 when another owner (or nobody) holds the lock; otherwise it deleted the lock and
-- returns 1 plus the number of subscribers that received the release message.
local held = redis.call('GET', KEYS[1])
if held and string.sub(held, 1, #ARGV[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= '' then
    return 1 + redis.call('PUBLISH', ARGV[2], ARGV[3])
  end
  return 1
end
return 0
