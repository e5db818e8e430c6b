-- Acquire a lock and issue its fencing token in one step, or queue for it.
-- KEYS[1], KEYS[2], KEYS[3]: the lock, fence and queue keys (see grant.lua).
-- ARGV[1]: the owner value, random and unique per acquisition, without ':'.
-- ARGV[2]: the lease length in milliseconds (a positive integer).
-- ARGV[3]: "1" to keep tokens at or above the server clock in microseconds, "0" otherwise.
-- ARGV[4]: "" for a single attempt; otherwise the waiter's queue element "<Locker id>.<n>",
--          to queue when busy.
-- ARGV[5]: the lifetime of queue entries in milliseconds.
-- ARGV[6]: the Locker's waiter value "<lease ms>:<floor>:<since>", or "" when its waiter key
--          is known to be alive (it is then left as it is).
-- ARGV[7]: the resource's notification channel; ARGV[8]: 'PUBLISH', 'SPUBLISH' or ''.
-- ARGV[9]: the counter's expiry in milliseconds, or "" for none.
-- Returns {1, token, pttl, behind} when acquired (behind: see next_token), also when ARGV[1] already holds the lock (a retried
-- call, which resets the lease); {0, pttl} when busy (pttl is -2 when the lock is free but waiters come first); and,
-- when ARGV[4] is set, {3, held} after queueing, where held is the lock value ("" if none).
-- A free lock goes to the first live waiter: a newcomer never jumps the queue. The counter
-- moves before the lock is set, so a failing INCR (at the int64 maximum) leaves no lock.
local held = redis.call('GET', KEYS[1])
if held then
  local mine = ARGV[1] .. ':'
  if string.sub(held, 1, #mine) == mine then
    redis.call('PEXPIRE', KEYS[1], ARGV[2]) -- a write, so that a WAIT after a retry waits for it
    return {1, string.sub(held, #mine + 1), redis.call('PTTL', KEYS[1])}
  end
else
  -- EXISTS first: under maxmemory, Redis refuses a script's INCR only while the script has
  -- not written yet, and LPOP counts as a write even on a missing key.
  local g = redis.call('EXISTS', KEYS[3]) == 1 and grant_next(ARGV[7], ARGV[8], '', '', ARGV[9])
  if not g then
    local token, behind = next_token(ARGV[3], ARGV[9])
    redis.call('SET', KEYS[1], ARGV[1] .. ':' .. token, 'PX', ARGV[2])
    return {1, token, tonumber(ARGV[2]), behind}
  end
  held = g[1] .. ':' .. g[2]
end
if ARGV[4] == '' then
  return {0, redis.call('PTTL', KEYS[1])}
end
redis.call('RPUSH', KEYS[3], ARGV[4])
redis.call('PEXPIRE', KEYS[3], ARGV[5])
if ARGV[6] ~= '' then
  redis.call('SET', waiter_key(locker_of(ARGV[4])), ARGV[6], 'PX', ARGV[5])
end
return {3, held or ''}
