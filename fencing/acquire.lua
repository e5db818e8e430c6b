-- Acquire a resource, exclusive, shared or one of n slots, and issue its fencing token in one
-- step, or queue for it (see lib.lua for the keys, the kinds and the queue's elements).
-- KEYS[1], KEYS[2], KEYS[3]: the resource's lock, fence and queue keys.
-- KEYS[4]: optional, a guard key of the resource (internal/seam): when it exists, the script
--          takes nothing and returns {7, its value}.
-- ARGV[1]: owner: random and unique per acquisition, without ':' or '.'.
-- ARGV[2]: lease: the lease length in milliseconds, a positive integer.
-- ARGV[3]: publish: how grants to waiters are announced: 'P' (PUBLISH, the default), 'S'
--          (SPUBLISH, on a Cluster) or '-' (not at all: waiters poll).
-- ARGV[4]: kind: 'x' (exclusive, the default), 'shared', or a limit n > 1.
-- ARGV[5]: floor: '1' to keep the token at or above the server clock in microseconds, '0'
--          (the default) not to.
-- ARGV[6]: expiry: the counter's expiry in milliseconds, or '0' (the default): none.
-- ARGV[7]: element: absent for a single attempt; otherwise the waiter's queue element, to
--          queue when the resource is busy.
-- ARGV[8]: entry: with ARGV[7], the Locker's waiter value, or "" when its waiter key and the
--          queue's TTL are known to be fresh (they are then left as they are).
-- Trailing arguments may be left out when they have their defaults.
-- Returns the token (a string) when acquired, also when ARGV[1] already holds the resource (a
-- retried call, which resets the lease); {1, token, behind} instead when the server clock is
-- behind the last token (see next_token); {0, left} when busy, left as lease_left says; with
-- an element, {3, held} after queueing, where held is an exclusive holder's lock value (it may
-- end in the mark '+') or ''; {6, kind} when the resource's live holders are of a kind this
-- acquisition cannot join even by waiting ('1' for an exclusive holder, 'shared' or a limit),
-- and then nothing is written. The queue is served first: a newcomer never goes ahead of a
-- waiter. The counter moves before the lock is written, so a failing INCR (at the int64
-- maximum) leaves no lock.
if KEYS[4] then
  local guard = redis.call('GET', KEYS[4])
  if guard then
    return {7, guard}
  end
end
-- The uncontended exclusive path, before lib.lua's functions are created: with the default
-- kind, floor and expiry, and no element, EXISTS of the lock and the queue first, and when
-- neither exists, that is all the script reads.
if not ARGV[4] and redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then
  local token = redis.call('INCR', KEYS[2])
  if token < 9007199254740992 then
    token = string.format('%d', token)
  else
    token = redis.call('GET', KEYS[2])
  end
  redis.call('SET', KEYS[1], ARGV[1] .. ':' .. token, 'PX', ARGV[2])
  return token
end
-- #include lib.lua
local owner, lease, publish = ARGV[1], ARGV[2], ARGV[3] or 'P'
local kind, floor, expiry = ARGV[4] or 'x', ARGV[5] or '0', ARGV[6] or '0'
local element = ARGV[7]
local r = resource(1)
local h = holders(r, kind)
local mine = owner .. ':'
-- A retried call: this owner holds the resource already.
if h and h.kind == 'x' then
  if string.sub(h.value, 1, #mine) == mine then
    redis.call('PEXPIRE', r.lock, lease) -- a write, so that a WAIT after a retry waits for it
    return string.match(h.value, '^%d+', #mine + 1)
  end
elseif h then
  for _, f in ipairs(h.fields) do
    if h.ends[f] and string.sub(f, 1, #mine) == mine then
      hold(h, f, h.now + tonumber(lease))
      settle(r, h)
      return string.sub(f, #mine + 1)
    end
  end
end
local other = mismatch(h, kind)
if other then
  settle(r, h)
  return {6, other}
end
-- Serve the queue first. EXISTS before LPOP: under maxmemory, Redis refuses a script's INCR
-- only while the script has not written yet, and LPOP counts as a write even on a missing key.
local queued, empty = false, false
if not free(h) or redis.call('EXISTS', r.queue) == 1 then
  local granted
  h, granted, queued = fill(r, h, publish, '')
else
  empty = true
end
if not queued and admits(h, kind) then
  local token, behind = next_token(r.fence, floor, expiry)
  if kind == 'x' then
    redis.call('SET', r.lock, mine .. token, 'PX', lease)
  else
    if free(h) then
      h = open(r, h, kind)
      if empty then
        h.queued, h.mark = true, false -- nobody queued: marked so in the same write
      end
    end
    hold(h, mine .. token, h.now + tonumber(lease))
    settle(r, h)
  end
  if behind > 0 then
    return {1, token, behind}
  end
  return token
end
if not element then
  settle(r, h)
  return {0, lease_left(r, h)}
end
-- A call sent again after a lost reply finds its element queued already, near the tail.
local n = 0
if not redis.call('LPOS', r.queue, element, 'RANK', -1, 'MAXLEN', 16) then
  n = redis.call('RPUSH', r.queue, element)
end
local held = ''
if h.kind == 'x' then
  held = h.value
  if string.sub(held, -1) ~= '+' then
    redis.call('APPEND', r.lock, '+') -- mark the lock: a waiter is queued behind its holder
  end
else
  h.mark = true -- mark the hash (see lib.lua)
end
settle(r, h)
if ARGV[8] ~= '' or n == 1 then -- a new queue always gets its TTL
  redis.call('PEXPIRE', r.queue, ENTRY_TTL)
end
if ARGV[8] ~= '' then
  redis.call('SET', r.base .. 'w:' .. string.match(element, '^[^.]*'), ARGV[8], 'PX', ENTRY_TTL)
end
return {3, held}
