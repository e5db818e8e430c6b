-- Delete a lock only if it still has the value the operator confirmed.
-- KEYS[1]: the lock key.
-- ARGV[1]: the value read before asking, "<owner>:<token>".
-- Returns 1 when the lock was deleted, 0 when there is no lock, and the current value
-- (a string) when another acquisition holds it now; nothing is changed then.
-- Nothing is published: waiters find the lock free through their own polling.
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return v
