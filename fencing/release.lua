-- Release a lock if this acquisition still holds it, and hand it to the next waiter in the
-- same step (see grant.lua).
-- KEYS[1], KEYS[2], KEYS[3]: the lock, fence and queue keys.
-- ARGV[1]: the lock value of this acquisition, "<owner>:<token>"; or "<owner>:" to release
--          whatever token that owner holds (after an acquire whose reply was lost).
-- ARGV[2]: opts (see grant.lua); may be left out when it is 'P0' and ARGV[3] is absent.
-- ARGV[3]: optional: the releasing Locker's id, when it has waiters queued for the
--          resource: a grant to one of them comes back in the reply, unannounced (see
--          grant_next).
-- Returns 5 when ARGV[1] does not hold the lock; 4 when it deleted the lock (also after
-- dropping dead waiters); {2, element, token} when it handed the lock to the waiter of that
-- queue element with a new token (the flags of every script, see scripts.go).
-- The release record <tag>:r:<owner>:<token> (a string, PX 10000; never for "<owner>:")
-- keeps the reply for a retried call: go-redis retries after a lost reply, and the retry,
-- finding the lock gone or handed on, returns what the first run did ("1", or
-- "2:<element>:<token>") instead of 0.
local record = string.sub(KEYS[1], 1, -5) .. 'r:' .. ARGV[1]
local exact = string.sub(ARGV[1], -1) ~= ':'
local function done(reply)
  if exact then
    redis.call('SET', record, reply, 'PX', 10000)
  end
end
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
  -- Unmarked: nobody queued behind this holder (see grant.lua).
  redis.call('DEL', KEYS[1])
  done('1')
  return 4
end
if not held or (held ~= ARGV[1] .. '+' and
    (exact or string.sub(held, 1, #ARGV[1]) ~= ARGV[1])) then
  local first = exact and redis.call('GET', record)
  if not first then
    return 5
  elseif first == '1' then
    return 4
  end
  local element, token = string.match(first, '^2:(.*):(%d+)$')
  return {2, element, token}
end
local head = redis.call('LPOP', KEYS[3])
if not head then
  redis.call('DEL', KEYS[1])
  done('1')
  return 4
end
-- #include grant.lua
local g = grant_next(head, ARGV[2] or 'P0', ARGV[3] or '')
if g then
  done('2:' .. g[1] .. ':' .. g[2])
  return {2, g[1], g[2]}
end
redis.call('DEL', KEYS[1])
done('1')
return 4
