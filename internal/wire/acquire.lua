-- Acquire a resource, exclusive, shared or one of n slots, and issue its fencing token in one
-- step, or queue for it (see doc.go for the keys and values, grants.lua for the states).
-- KEYS[1]: the resource's lock key; its fence and queue keys are named after it, in its
--          Cluster slot. On a Cluster they follow it, with the memo's key of ARGV[9], declared
--          only (see wire.Declare).
-- ARGV[1]: owner: random and unique per acquisition, without ':' or '.'.
-- ARGV[2]: lease: the lease length in milliseconds, a positive integer.
-- ARGV[3]: kind: 'x' (exclusive, the default), 's' (shared) or 'l<n>' (one of n > 1 slots).
-- ARGV[4]: element: '' (the default) for a single attempt; otherwise the waiter's queue
--          element, to queue when the resource is busy.
-- ARGV[5]: entry: with an element, the Locker's waiter value (when it began waiting, unix
--          ms), or '' when its waiter key and the queue's TTL are known to be fresh.
-- ARGV[6]: publish: how grants to waiters are announced: 'P' (PUBLISH, the default), 'S'
--          (SPUBLISH, on a Cluster) or '-' (not at all: waiters poll).
-- ARGV[7]: floor: '1' to keep the token at or above the server clock in microseconds, '0'
--          (the default) not to.
-- ARGV[8]: expiry: the counter's expiry in milliseconds, or '0' (the default): none.
-- ARGV[9]: memo: '' (the default), or the name of a memo of the resource ("<base><memo>"):
--          when it exists, nothing is taken and the reply is {MEMO, its value}.
-- Trailing arguments are left out when they have their defaults.
-- Returns the token (a string) when acquired, also when ARGV[1] already holds the resource (a
-- call sent again after a lost reply, which resets the lease); {TAKEN, token, behind} instead
-- when the server clock is behind the last token (see next_token); {BUSY, left} when busy,
-- left as lease_left says; with an element, {QUEUED, held, left} once queued, held being an
-- exclusive holder's lock value (perhaps with the mark '+') or '', and left as lease_left
-- says for holders that are not an exclusive one (whose PTTL the caller read before); {MISMATCH, kind} when the
-- live holders are of a kind this call cannot join even by waiting; {LAYOUT} when the lock is
-- a hash of the earlier layout; {MEMO, value}. The last three write nothing. The queue is
-- served first: a newcomer never goes ahead of a waiter. The counter moves before the lock is
-- written, so a failing INCR (at the int64 maximum) leaves no lock.
local owner, lease, kind = ARGV[1], ARGV[2], ARGV[3] or 'x'
if ARGV[9] and ARGV[9] ~= '' then
  local memo = redis.call('GET', string.sub(KEYS[1], 1, -5) .. ARGV[9])
  if memo then
    return {MEMO, memo}
  end
end
-- The fast paths, with the default rules for the token: nothing else is read or created.
local base = string.sub(KEYS[1], 1, -5)
local queue -- its name, once made
if (ARGV[7] or '0') == '0' and (ARGV[8] or '0') == '0' then
  if kind == 'x' then
    -- Nobody holds the resource and nobody waits for it.
    queue = base .. 'queue'
    if redis.call('EXISTS', KEYS[1], queue) == 0 then
      local n = redis.call('INCR', base .. 'fence')
      local token = n < 9007199254740992 and string.format('%d', n) or redis.call('GET', base .. 'fence')
      redis.call('SET', KEYS[1], owner .. ':' .. token, 'PX', lease)
      return token
    end
  else
    -- Holders of the same kind, nobody waiting, room left: one more holder. The time is
    -- the hash's expiry t less its TTL.
    local h = redis.pcall('HMGET', KEYS[1], 'k', 'q', 'e', 'x', 't', owner)
    if not h.err and h[1] == kind and h[2] == '0' and not h[6] and
        (kind == 's' or redis.call('HLEN', KEYS[1]) - META < tonumber(string.sub(kind, 2))) then
      local t = tonumber(h[5])
      local left = redis.call('PTTL', KEYS[1])
      if left >= 0 then
        local now = t - left
        local ending = now + tonumber(lease)
        local n = redis.call('INCR', base .. 'fence')
        local token = n < 9007199254740992 and string.format('%d', n) or redis.call('GET', base .. 'fence')
        local d = string.format('%d', ending)
        local later, earlier, moved = ending > tonumber(h[4]), ending < tonumber(h[3]), ending > t
        if later and not earlier and not moved then
          redis.call('HSET', KEYS[1], owner, d .. ':' .. token, 'x', d) -- the usual case
          return token
        end
        local w = {owner, d .. ':' .. token}
        if later then
          w[3], w[4] = 'x', d
        end
        if earlier then
          w[#w + 1], w[#w + 2] = 'e', d
        end
        if moved then
          t = 2 * ending - now
          w[#w + 1], w[#w + 2] = 't', string.format('%d', t)
        end
        redis.call('HSET', KEYS[1], unpack(w))
        if moved then
          redis.call('PEXPIRE', KEYS[1], string.format('%d', t - now))
        end
        return token
      end
    end
  end
end
-- Behind an exclusive holder (the wait most calls make): busy, or into the queue, reading
-- nothing else.
local element = ARGV[4] or ''
local held = redis.pcall('GET', KEYS[1])
if type(held) == 'string' then
  if string.find(held, owner, 1, true) == 1 and string.byte(held, #owner + 1) == 58 then -- "<owner>:"
    -- A call sent again: this owner holds the resource already.
    redis.call('PEXPIRE', KEYS[1], lease) -- a write, so that a WAIT after it waits for it
    return string.match(held, '^%d+', #owner + 2)
  elseif kind ~= 'x' and kind ~= 's' then
    return {MISMATCH, 'x'}
  end
  if element == '' then
    return {BUSY, redis.call('PTTL', KEYS[1])}
  end
  queue = queue or base .. 'queue'
  -- Once: a call sent again after a lost reply finds the lock marked (below), and its
  -- element near the tail of the queue.
  local marked = string.byte(held, -1) == 43 -- '+'
  local n = 0
  if not (marked and redis.call('LPOS', queue, element, 'RANK', -1, 'MAXLEN', 16)) then
    n = redis.call('RPUSH', queue, element)
  end
  if not marked then
    redis.call('APPEND', KEYS[1], '+') -- mark the lock: a waiter is queued behind its holder
  end
  if ARGV[5] ~= '' or n == 1 then -- a new queue always gets its TTL
    redis.call('PEXPIRE', queue, ENTRY_TTL)
  end
  if ARGV[5] ~= '' then
    redis.call('SET', base .. 'w:' .. string.match(element, '^[^.]*'), ARGV[5], 'PX', ENTRY_TTL)
  end
  return {QUEUED, held}
end
-- #include grants.lua
local publish = ARGV[6] or 'P'
local floor, expiry = ARGV[7] or '0', ARGV[8] or '0'
local r = resource(KEYS[1])
local s = state(r, held, owner)
local now
if s.shape == 'old' then
  return {LAYOUT}
elseif s.shape == 'hash' then
  now = clock(r, s)
  local mine = s.mine
  if mine then
    local token = string.match(mine, ':(%d+)$')
    hold(r, s, owner, token, now + tonumber(lease), now, true)
    return token
  end
  sweep(r, s, now)
end
local other = mismatch(s, kind)
if other then
  return {MISMATCH, other}
end
-- Serve the queue first. EXISTS before LPOP: under maxmemory, Redis refuses a script's INCR
-- only while the script has not written yet, and LPOP counts as a write even on a missing key.
local queued
if s.shape == 'x' then
  queued = true
elseif s.shape == 'hash' and not free(s) then
  queued = s.q == '1'
else
  queued = redis.call('EXISTS', r.queue) == 1
end
if queued then
  local granted
  s, granted, queued = fill(r, s, publish, '', now)
end
if not queued and admits(s, kind) then
  local token, behind = next_token(r, floor, expiry)
  if kind == 'x' then
    redis.call('SET', r.lock, owner .. ':' .. token, 'PX', lease)
  else
    now = now or clock(r, s)
    local ending = now + tonumber(lease)
    if free(s) then
      open(r, kind, '0', owner, token, ending, now)
    else
      hold(r, s, owner, token, ending, now)
    end
  end
  if behind > 0 then
    return {TAKEN, token, behind}
  end
  return token
end
if element == '' then
  now = now or clock(r, s)
  return {BUSY, lease_left(r, s, now)}
end
-- Join the queue, once (see above).
local n = 0
if not redis.call('LPOS', r.queue, element, 'RANK', -1, 'MAXLEN', 16) then
  n = redis.call('RPUSH', r.queue, element)
end
local holder = ''
if s.shape == 'x' then
  holder = s.value
  if string.sub(holder, -1) ~= '+' then
    redis.call('APPEND', r.lock, '+') -- mark the lock (see above)
  end
elseif s.q ~= '1' then
  redis.call('HSET', r.lock, 'q', '1') -- mark the hash likewise
end
if ARGV[5] ~= '' or n == 1 then -- a new queue always gets its TTL
  redis.call('PEXPIRE', r.queue, ENTRY_TTL)
end
if ARGV[5] ~= '' then
  redis.call('SET', r.base .. 'w:' .. string.match(element, '^[^.]*'), ARGV[5], 'PX', ENTRY_TTL)
end
return {QUEUED, holder, lease_left(r, s, now or clock(r, s))}
