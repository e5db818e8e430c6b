-- Delete an exclusive lock only if it still has the value the operator confirmed.
-- KEYS[1]: the lock key.
-- ARGV[1]: the value read before asking, "<owner>:<token>" (with '+' when waiters queued).
-- Returns 1 when the lock was deleted, 0 when there is no lock, -1 when shared or limited
-- holders hold the resource now (the key is a hash), and the current value (a string) when
-- another exclusive acquisition holds it now; nothing is changed but for 1.
-- Nothing is published: waiters find the lock free through their own polling.
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'none' then
  return 0
elseif t ~= 'string' then
  return -1
end
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return v
