-- Keep a Locker's place in a resource's queue and find out whether the lock was granted to
-- it, for a waiter that heard nothing for a while (a lost notification, a holder that died).
-- KEYS[1], KEYS[2], KEYS[3]: the lock, fence and queue keys (see grant.lua).
-- ARGV[1]: the Locker's id.
-- ARGV[2]: how many elements the Locker should have in the queue (its queued waiters).
-- ARGV[3]: the highest token the Locker has already received for this resource.
-- ARGV[4]: the lifetime of queue entries in milliseconds.
-- ARGV[5]: the Locker's waiter value "<lease ms>:<floor>:<since>".
-- ARGV[6]: the resource's notification channel; ARGV[7]: 'PUBLISH', 'SPUBLISH' or ''.
-- ARGV[8]: the counter's expiry in milliseconds, or "" for none.
-- Returns {2, token} when the lock is granted to the Locker with a token it has not received
-- (one of its elements was used for it), and otherwise {0, held}: the lock value, "" if none. A free lock (its holder's lease
-- ran out) goes to the first live waiter. The Locker's elements are then made to number
-- ARGV[2] (less one for such a grant): missing ones (dropped while its key had lapsed) are
-- added at the tail, extra ones removed from the tail.
local mine = ARGV[1] .. ':'
local granted
local held = redis.call('GET', KEYS[1])
if not held then
  local g = grant_next(ARGV[6], ARGV[7], ARGV[1], ARGV[5], ARGV[8])
  if g then
    held = g[1] .. ':' .. g[2]
    if g[1] == ARGV[1] then
      granted = g[2]
    end
  end
elseif string.sub(held, 1, #mine) == mine then
  local t = string.sub(held, #mine + 1)
  local last = ARGV[3]
  if #t > #last or (#t == #last and t > last) then
    granted = t
  end
end
local want = tonumber(ARGV[2])
if granted then
  want = want - 1
end
local have = #redis.call('LPOS', KEYS[3], ARGV[1], 'COUNT', 0)
for _ = have + 1, want do
  redis.call('RPUSH', KEYS[3], ARGV[1])
end
if have > want then
  redis.call('LREM', KEYS[3], want - have, ARGV[1])
end
if want > 0 then
  redis.call('PEXPIRE', KEYS[3], ARGV[4])
  redis.call('SET', waiter_key(ARGV[1]), ARGV[5], 'PX', ARGV[4])
end
if granted then
  return {2, granted}
end
return {0, held or ''}
