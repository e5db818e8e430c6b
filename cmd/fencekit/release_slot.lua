-- Free one holder's slot of a limited resource (fencing.WithLimit) if it still holds it.
-- KEYS[1]: the lock key, a hash: 'limit' and one field "<owner>:<token>" per holder.
-- ARGV[1]: the holder's field, read before asking.
-- Returns 1 when the slot was freed (the key is deleted with its last holder), 0 when the
-- holder no longer holds it. Nothing is published: waiters take the slot through their own
-- polling.
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if redis.call('HLEN', KEYS[1]) <= 1 then
  redis.call('DEL', KEYS[1])
end
return 1
