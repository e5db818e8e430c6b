-- Acquire a lock and issue its fencing token in one step, or queue for it.
-- KEYS[1], KEYS[2], KEYS[3]: the lock, fence and queue keys (see grant.lua).
-- ARGV[1]: the owner value, random and unique per acquisition, without ':'.
-- ARGV[2]: the lease length in milliseconds (a positive integer).
-- ARGV[3]: opts (see grant.lua); may be left out when it is 'P0'.
-- ARGV[4]: absent for a single attempt; otherwise the waiter's queue element
--          "<Locker id>.<n>.<lease ms>[f]" (see grant_next), to queue when busy.
-- ARGV[5]: with ARGV[4], the Locker's waiter value "<lease ms>:<floor>:<since>", or "" when
--          its waiter key and the queue's TTL are known to be fresh (they are then left as
--          they are: the Locker renews them at least every 1.5 s, well within ENTRY_TTL).
-- Returns the token (a string) when acquired, also when ARGV[1] already holds the lock (a
-- retried call, which resets the lease); {1, token, behind} instead when the server clock
-- is behind the last token (see next_token); {0, pttl} when busy, the holder's remaining TTL;
-- and, with ARGV[4], {3, held} after queueing, where held is the lock value (it may end in the
-- mark '+', see grant.lua). A free lock goes to the first live waiter, if any: a newcomer never
-- jumps the queue (it is then busy, or queues behind that waiter). The counter moves before
-- the lock is set, so a failing INCR (at the int64 maximum) leaves no lock.
-- KEYS[4]: optional: a guard key in the same slot (package internal/seam). When it exists,
-- the script takes nothing and returns {7, its value}.
if KEYS[4] then
  local guard = redis.call('GET', KEYS[4])
  if guard then
    return {7, guard}
  end
end
local opts = ARGV[3] or 'P0'
-- EXISTS of the lock and the queue first: when neither exists (no contention), that is all
-- the script reads. With the usual settings, that path runs before the functions of grant.lua
-- are created (Lua creates a script's functions each time it runs, at a cost comparable to
-- the path itself).
local found = ARGV[4] or redis.call('EXISTS', KEYS[1], KEYS[3]) > 0
if not found and (opts == 'P0' or opts == 'S0' or opts == '-0') then
  local token = redis.call('INCR', KEYS[2])
  if token < 9007199254740992 then
    token = string.format('%d', token)
  else
    token = redis.call('GET', KEYS[2])
  end
  redis.call('SET', KEYS[1], ARGV[1] .. ':' .. token, 'PX', ARGV[2])
  return token
end
-- #include grant.lua
local held
if found then
  held = redis.call('GET', KEYS[1])
  if held then
    local mine = ARGV[1] .. ':'
    if string.sub(held, 1, #mine) == mine then
      redis.call('PEXPIRE', KEYS[1], ARGV[2]) -- a write, so that a WAIT after a retry waits for it
      return string.match(held, '^%d+', #mine + 1)
    end
  elseif redis.call('EXISTS', KEYS[3]) == 1 then
    -- EXISTS first: under maxmemory, Redis refuses a script's INCR only while the script
    -- has not written yet, and LPOP counts as a write even on a missing key.
    local g = grant_next(redis.call('LPOP', KEYS[3]), opts, '')
    if g then
      held = g[1] .. ':' .. g[2] .. '+'
    end
  end
end
if not held then
  local token, behind = next_token(settings(opts))
  redis.call('SET', KEYS[1], ARGV[1] .. ':' .. token, 'PX', ARGV[2])
  if behind > 0 then
    return {1, token, behind}
  end
  return token
end
if not ARGV[4] then
  return {0, redis.call('PTTL', KEYS[1])}
end
local n = redis.call('RPUSH', KEYS[3], ARGV[4])
if held and string.sub(held, -1) ~= '+' then
  redis.call('APPEND', KEYS[1], '+') -- mark the lock: a waiter is queued behind its holder
end
if ARGV[5] ~= '' or n == 1 then -- a new queue always gets its TTL
  redis.call('PEXPIRE', KEYS[3], ENTRY_TTL)
end
if ARGV[5] ~= '' then
  redis.call('SET', waiter_key(locker_of(ARGV[4])), ARGV[5], 'PX', ENTRY_TTL)
end
return {3, held or ''}
