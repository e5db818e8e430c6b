-- Take one of the n slots of a limited resource and issue its fencing token in one step, or
-- queue for one (see limit.lua and grant.lua).
-- KEYS[1], KEYS[2], KEYS[3]: the lock (a hash here), fence and queue keys.
-- ARGV[1]: the owner value, random and unique per acquisition, without ':'.
-- ARGV[2]: the lease length in milliseconds (a positive integer).
-- ARGV[3]: opts (see grant.lua).
-- ARGV[4]: the limit n, a decimal integer above 1.
-- ARGV[5]: absent for a single attempt; otherwise the waiter's queue element
--          "<Locker id>.<n>.<lease ms>[f]", to queue when no slot is free.
-- ARGV[6]: with ARGV[5], the Locker's waiter value, or "" (as ARGV[5] of acquire.lua).
-- Returns the token (a string) when acquired, also when ARGV[1] already holds a slot (a
-- retried call, which resets its lease); {1, token, behind} instead when the server clock is
-- behind the last token (see next_token); {0, pttl} when every slot is taken, pttl being the
-- time until the earliest lease ends; with ARGV[5], {3, ''} after queueing; {6, limit} when
-- live holders use another limit (limit '1': an exclusive lock holds the resource), and then
-- nothing is written. Free slots go to the queue's live waiters first: a newcomer never jumps
-- the queue. Once no holder is live, a new limit takes effect.
-- #include grant.lua
-- #include limit.lua
local opts, limit = ARGV[3], ARGV[4]
local n = tonumber(limit)
local now = clock()
local h = holders(now)
if not h then
  return {6, '1'}
end
if h.live > 0 and h.limit ~= limit then
  return {6, h.limit or '?'}
end
local mine = ARGV[1] .. ':'
for _, f in ipairs(h.fields) do
  if h.ends[f] and string.sub(f, 1, #mine) == mine then
    hold(h, f, now + tonumber(ARGV[2]))
    settle(h, now, limit)
    return string.sub(f, #mine + 1)
  end
end
fill(h, now, n, opts, '')
if h.live < n then
  local token, behind = next_token(settings(opts))
  hold(h, mine .. token, now + tonumber(ARGV[2]))
  settle(h, now, limit)
  if behind > 0 then
    return {1, token, behind}
  end
  return token
end
settle(h, now, limit)
if not ARGV[5] then
  local first = bounds(h)
  return {0, first - now}
end
local len = redis.call('RPUSH', KEYS[3], ARGV[5])
if ARGV[6] ~= '' or len == 1 then
  redis.call('PEXPIRE', KEYS[3], ENTRY_TTL)
end
if ARGV[6] ~= '' then
  redis.call('SET', waiter_key(locker_of(ARGV[5])), ARGV[6], 'PX', ENTRY_TTL)
end
return {3, ''}
