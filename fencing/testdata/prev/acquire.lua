local BUSY, TAKEN, QUEUED, MISMATCH, LAYOUT, MEMO, META, ENTRY_TTL = 0, 1, 3, 6, 7, 8, 5, '3000'
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
-- The functions of the scripts' slow paths: the text of a script's line
-- "-- #include grants.lua", which stands after the script's fast paths, so that a call that
-- takes a fast path creates none of them (see doc.go for the keys, their values and the
-- constants every script starts with).
--
-- A resource r is {lock = ..., fence = ..., queue = ..., base = "<prefix><tag>:"}. Its state s,
-- as state reads it:
--   {shape = 'none'}: nobody holds it;
--   {shape = 'x', value = v}: an exclusive holder, whose lock value v is "<owner>:<token>",
--     with '+' after it when waiters may be queued behind the holder;
--   {shape = 'hash', kind, q, e, x, t, count, mine}: shared or limited holders of kind 's' or
--     'l<n>', the queue mark q ('1' when waiters may be queued, '0' when none are), a lower
--     bound e of their leases' ends and an upper bound x, the key's expiry t (all in server
--     milliseconds), and count, the number of holder fields, some of which may have ended
--     (see sweep), and mine, the field of the owner state was asked for, if any; the hash
--     outlives its last holder, until t;
--   {shape = 'old'}: a hash of the earlier layout (its field 'limit'), which no script here
--     changes: its calls answer LAYOUT.
-- Kinds are 'x' (exclusive), 's' (shared) and 'l<n>' (one of n slots). Tokens and times are
-- written as decimal strings: a Lua number is a double, which would round a token above 2^53.

-- resource returns the keys of the resource whose lock key is lock.
local function resource(lock)
  local base = string.sub(lock, 1, -5)
  return {lock = lock, fence = base .. 'fence', queue = base .. 'queue', base = base}
end

-- clock returns the server time in milliseconds. With the state s of a hash, it reads it from
-- the key's TTL, which ends at the time its field t holds (one integer reply, where TIME
-- costs an array turned into a Lua table and two numbers parsed).
local function clock(r, s)
  if s and s.shape == 'hash' then
    local left = redis.call('PTTL', r.lock)
    if left >= 0 then
      return s.t - left
    end
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- ms formats a time or a duration in milliseconds.
local function ms(n)
  return string.format('%d', n)
end

-- next_token moves r's counter and returns the new token. With floor '1', the token is at
-- least the server clock in microseconds; the second result is then how many microseconds
-- the clock is behind the last token when that is more than a second (the clock stepped
-- back), and 0 otherwise. With expiry other than '0' (milliseconds), the counter expires
-- after that long without a new token.
local function next_token(r, floor, expiry)
  local token
  local behind = 0
  if floor == '1' then
    local now = redis.call('TIME')
    local f = now[1] .. string.format('%06d', tonumber(now[2]))
    local last = redis.call('GET', r.fence) or '0'
    if string.sub(last, 1, 1) == '-' or #last < #f or (#last == #f and last < f) then
      redis.call('SET', r.fence, f)
      token = f
    elseif tonumber(last) - tonumber(f) > 1000000 then
      behind = tonumber(last) - tonumber(f)
    end
  end
  if not token then
    local n = redis.call('INCR', r.fence)
    if n < 9007199254740992 then
      token = ms(n)
    else
      token = redis.call('GET', r.fence)
    end
  end
  if expiry ~= '0' then
    redis.call('PEXPIRE', r.fence, expiry)
  end
  return token, behind
end

-- parse reads a queue element, "<id>.<n>.<lease ms>" and then the waiter's rules: 'f' when
-- its tokens are floored at the server clock, 'e<ms>' when its counter expires (which implies
-- the floor), then 's' when it is shared or 'l<n>' for one of n slots (neither: exclusive).
-- It returns the waiting Locker's id, the lease of a grant, and the waiter's kind, floor and
-- expiry, or nil for anything else.
local function parse(element)
  local id, lease, rules = string.match(element, '^([^.]*)%.%d+%.(%d+)(.*)$')
  if not id then
    return nil
  end
  local kind, floor, expiry = 'x', '0', '0'
  if rules ~= '' then
    local e = string.match(rules, 'e(%d+)')
    if e then
      floor, expiry = '1', e
    elseif string.find(rules, 'f', 1, true) then
      floor = '1'
    end
    if string.find(rules, 's', 1, true) then
      kind = 's'
    else
      local n = string.match(rules, 'l(%d+)')
      if n then
        kind = 'l' .. n
      end
    end
  end
  return id, lease, kind, floor, expiry
end

-- state reads r's holders (see above), in one command for an exclusive holder or nobody;
-- seen, when not nil, is what a GET of the lock answered already in this script; owner, when
-- not nil, names the holder field to read as mine.
local function state(r, seen, owner)
  local v = seen
  if v == nil then
    v = redis.pcall('GET', r.lock)
  end
  if type(v) == 'string' then
    return {shape = 'x', value = v}
  elseif not v then
    return {shape = 'none'}
  end
  local h = redis.call('HMGET', r.lock, 'k', 'q', 'e', 'x', 't', 'limit', owner or 'k')
  if h[6] or not h[1] then
    return {shape = 'old'}
  end
  return {
    shape = 'hash', kind = h[1], q = h[2], e = tonumber(h[3]), x = tonumber(h[4]), t = tonumber(h[5]),
    count = redis.call('HLEN', r.lock) - META, mine = owner and h[7],
  }
end

-- sweep, when some of hash state s's holders may have ended by now (now at or past s.e),
-- deletes those that have, and sets s.count, s.e and s.x to what the others say; with none
-- left, it deletes the key, and s becomes 'none'.
local function sweep(r, s, now)
  if s.shape ~= 'hash' or s.count <= 0 or now < s.e then
    return
  end
  local all = redis.call('HGETALL', r.lock)
  local gone, e, x, count = {}, nil, 0, 0
  for i = 1, #all, 2 do
    local f = all[i]
    if #f > 1 then -- a holder: the one-letter fields are the hash's own
      local ending = tonumber(string.match(all[i + 1], '^%d+'))
      if ending <= now then
        gone[#gone + 1] = f
      else
        count = count + 1
        e = math.min(e or ending, ending)
        x = math.max(x, ending)
      end
    end
  end
  if count == 0 then
    redis.call('DEL', r.lock)
    s.shape, s.count = 'none', 0
    return
  end
  for i = 1, #gone, 1000 do
    redis.call('HDEL', r.lock, unpack(gone, i, math.min(i + 999, #gone)))
  end
  s.count, s.e, s.x = count, e, x
  redis.call('HSET', r.lock, 'e', ms(e), 'x', ms(x))
end

-- free reports whether state s leaves the resource free: nobody holds it, or no holder is
-- left in its hash (s swept).
local function free(s)
  return s.shape == 'none' or (s.shape == 'hash' and s.count <= 0)
end

-- admits reports whether an acquisition of kind may join the holders of state s (swept).
local function admits(s, kind)
  if free(s) then
    return true
  elseif s.shape ~= 'hash' or s.kind ~= kind then
    return false
  end
  return kind == 's' or s.count < tonumber(string.sub(kind, 2))
end

-- mismatch returns the holders' kind when an acquisition of kind can never join them, not
-- even by waiting: exclusive and shared acquisitions wait for each other, but a limit mixes
-- with no other kind while its holders live. Returns nil otherwise.
local function mismatch(s, kind)
  if free(s) then
    return nil
  end
  local have = s.shape == 'x' and 'x' or s.kind
  if have == kind or ((kind == 'x' or kind == 's') and (have == 'x' or have == 's')) then
    return nil
  end
  return have
end

-- lease_left returns how long until state s's holders let the resource change hands, in
-- milliseconds: the exclusive holder's lease, the latest of shared holders', the earliest of
-- a limit's (the bounds x and e).
local function lease_left(r, s, now)
  if s.shape == 'x' then
    return redis.call('PTTL', r.lock)
  elseif s.kind == 's' then
    return s.x - now
  end
  return s.e - now
end

-- hold writes field f of hash state s, a new holder with token whose lease ends at ending
-- (or, with again, a holder renewed), moving the bounds e and x and, past the key's expiry t,
-- the expiry to as long again.
local function hold(r, s, f, token, ending, now, again)
  if not again then
    s.count = s.count + 1
  end
  local w = {f, ms(ending) .. ':' .. token}
  if ending > s.x then
    s.x = ending
    w[#w + 1], w[#w + 2] = 'x', ms(ending)
  end
  if ending < s.e then
    s.e = ending
    w[#w + 1], w[#w + 2] = 'e', ms(ending)
  end
  local expire = ending > s.t
  if expire then
    s.t = 2 * ending - now
    w[#w + 1], w[#w + 2] = 't', ms(s.t)
  end
  redis.call('HSET', r.lock, unpack(w))
  if expire then
    redis.call('PEXPIRE', r.lock, ms(s.t - now))
  end
end

-- open makes r a hash of kind with one holder, field f with token whose lease ends at ending,
-- marked q, over whatever its key held (a lock that was free), and returns its state.
local function open(r, kind, q, f, token, ending, now)
  local t = 2 * ending - now
  redis.call('HSET', r.lock, 'k', kind, 'q', q, 'e', ms(ending), 'x', ms(ending), 't', ms(t), f, ms(ending) .. ':' .. token)
  redis.call('PEXPIRE', r.lock, ms(t - now))
  return {shape = 'hash', kind = kind, q = q, e = ending, x = ending, t = t, count = 1}
end

-- fill grants r to the waiters at the head of its queue, in order, while each fits what
-- state s (swept) leaves: anyone when it is free, a shared waiter beside shared holders, a
-- waiter of the same limit while a slot is free, nobody beside an exclusive holder. Each
-- grant takes a new token under the waiter's own rules (see parse); an exclusive waiter gets
-- the lock "<element>:<token>", with the mark '+' when more waiters are queued, and the
-- element's lease; a hash holder the field "<element>". A waiter is alive when its Locker is
-- self (the grant then comes back in the reply, unannounced), when the announcement of
-- "<element>:<token>" on its Locker's channel reached a subscriber (publish: 'P' PUBLISH, 'S'
-- SPUBLISH, '-' nothing), or else when its Locker's waiter key exists; a dead waiter is
-- dropped (its token is used up). Returns the state after, the grants to self as a list
-- {element, token, ...}, and whether waiters may be left queued.
local function fill(r, s, publish, self, now)
  local mine = {}
  while s.shape ~= 'x' do
    local element
    if free(s) then
      element = redis.call('LPOP', r.queue)
    elseif s.q ~= '1' then
      return s, mine, false
    elseif s.kind ~= 's' and s.count >= tonumber(string.sub(s.kind, 2)) then
      return s, mine, true -- every slot taken: no waiter fits, the queue is left unread
    else
      element = redis.call('LINDEX', r.queue, 0)
      if element then
        local _, _, kind = parse(element)
        if kind and kind ~= s.kind then
          return s, mine, true
        end
        redis.call('LPOP', r.queue)
      end
    end
    if not element then
      if s.shape == 'hash' and s.q ~= '0' then
        redis.call('HSET', r.lock, 'q', '0')
        s.q = '0'
      end
      return s, mine, false
    end
    local id, lease, kind, floor, expiry = parse(element)
    if id then
      local token = next_token(r, floor, expiry)
      local value = element .. ':' .. token
      local alive = id == self
      if not alive then
        if publish ~= '-' then
          local channel = r.base .. 'grant:' .. id
          alive = redis.call(publish == 'S' and 'SPUBLISH' or 'PUBLISH', channel, value) > 0
        end
        alive = alive or redis.call('EXISTS', r.base .. 'w:' .. id) == 1
      end
      if alive then
        if kind == 'x' then
          if redis.call('EXISTS', r.queue) == 1 then
            value = value .. '+'
          end
          redis.call('SET', r.lock, value, 'PX', lease)
          s = {shape = 'x', value = value}
        else
          now = now or clock(r, s)
          local ending = now + tonumber(lease)
          if free(s) then
            s = open(r, kind, '1', element, token, ending, now)
          else
            hold(r, s, element, token, ending, now)
          end
        end
        if id == self then
          mine[#mine + 1], mine[#mine + 2] = element, token
        end
      end
    end
  end
  return s, mine, true
end
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
