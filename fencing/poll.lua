-- Keep a Locker's waiters in a resource's queue and find out whether the lock was granted to
-- one of them, for a waiter that heard nothing for a while (a lost announcement, a holder
-- that died).
-- KEYS[1], KEYS[2], KEYS[3]: the lock, fence and queue keys (see grant.lua).
-- ARGV[1]: the Locker's id; ARGV[2]: its waiter value "<lease ms>:<floor>:<since>".
-- ARGV[3]: opts (see grant.lua).
-- ARGV[4] and on: the queue elements of the Locker's waiters that have not received a grant,
--          longest-waiting first.
-- A free lock (its holder's lease ran out) goes to the first live waiter. Returns {2, element,
-- token, now} when the lock is granted to one of the waiters of ARGV[4..] (now is 1 when this
-- call granted it, 0 when it was granted before), and otherwise {0, held, pttl}: the lock
-- value and its remaining TTL in milliseconds (the waiter checks again when it ends), or
-- {0, ""} when the lock is free. Elements of ARGV[4..] missing from the queue (dropped while
-- the Locker's key had lapsed) are added at the tail, except one that holds the lock.
-- #include grant.lua
local granted, now
local held = redis.call('GET', KEYS[1])
if not held then
  local g = grant_next(redis.call('LPOP', KEYS[3]), ARGV[3], ARGV[1])
  if g then
    held, now = g[1] .. ':' .. g[2], 1
  end
end
local mine = {}
for i = 4, #ARGV do
  mine[ARGV[i]] = true
end
if held then
  local owner, token = string.match(held, '^(.*):(%d+)%+?$')
  if owner and mine[owner] then
    granted = {2, owner, token, now or 0}
    mine[owner] = nil
  end
end
if #ARGV >= 4 then
  if #ARGV == 4 then
    if mine[ARGV[4]] and redis.call('LPOS', KEYS[3], ARGV[4]) then
      mine[ARGV[4]] = nil
    end
  else
    for _, e in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
      mine[e] = nil
    end
  end
  for i = 4, #ARGV do
    if mine[ARGV[i]] then
      redis.call('RPUSH', KEYS[3], ARGV[i])
      if held and now == nil and string.sub(held, -1) ~= '+' then
        redis.call('APPEND', KEYS[1], '+') -- mark the lock (see grant.lua)
        held = held .. '+'
      end
    end
  end
  redis.call('PEXPIRE', KEYS[3], ENTRY_TTL)
  redis.call('SET', waiter_key(ARGV[1]), ARGV[2], 'PX', ENTRY_TTL)
end
if granted then
  return granted
end
if held then
  return {0, held, redis.call('PTTL', KEYS[1])}
end
return {0, ''}
