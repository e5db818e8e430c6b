local BUSY, GRANTED, LAYOUT, META, ENTRY_TTL = 0, 2, 7, 5, '3000'
-- Keep a Locker's waiters in a resource's queue and find out whether the resource was granted
-- to some of them, for a waiter that heard nothing for a while (a lost announcement, a holder
-- whose lease ran out); see doc.go and grants.lua.
-- KEYS[1]: the resource's lock key (the others are named after it); on a Cluster its fence and
--          queue keys follow, declared only (see wire.Declare).
-- ARGV[1]: id: the Locker's id.
-- ARGV[2]: entry: its waiter value (when it began waiting, unix ms).
-- ARGV[3]: publish: 'P', 'S' or '-' (see acquire.lua).
-- ARGV[4] and on: the queue elements of the Locker's waiters that have not received a grant,
--          longest-waiting first.
-- Elements of ARGV[4..] missing from the queue (dropped while the Locker's key had lapsed) are
-- added at the tail, except those that hold the resource; then whatever fits is granted to the
-- queue's head waiters (holders whose lease ended are gone). Returns {GRANTED, element, token,
-- now, ...}, one triple per grant to a waiter of this Locker (now is 1 when this call granted
-- it, 0 when it was granted before); otherwise {BUSY, held, left}: an exclusive holder's lock
-- value (or '' for other holders) and lease_left's milliseconds (the waiter checks again
-- then), or {BUSY, ''} when the resource is free; {LAYOUT} for a hash of the earlier layout.
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
local id, publish = ARGV[1], ARGV[3]
local r = resource(KEYS[1])
local s = state(r)
if s.shape == 'old' then
  return {LAYOUT}
end
local now
if s.shape == 'hash' then
  now = clock(r, s)
end
local out = {}
local mine = {}
for i = 4, #ARGV do
  mine[ARGV[i]] = true
end
-- Grants made before whose announcement was lost: this Locker's elements among the holders.
if s.shape == 'x' then
  local owner, token = string.match(s.value, '^(.*):(%d+)%+?$')
  if owner and mine[owner] then
    out[#out + 1], out[#out + 2], out[#out + 3] = owner, token, 0
    mine[owner] = nil
  end
elseif s.shape == 'hash' and #ARGV >= 4 then
  local held = redis.call('HMGET', r.lock, unpack(ARGV, 4))
  for i = 4, #ARGV do
    local f = held[i - 3]
    if f and tonumber(string.match(f, '^%d+')) > now then
      out[#out + 1], out[#out + 2], out[#out + 3] = ARGV[i], string.match(f, ':(%d+)$'), 0
      mine[ARGV[i]] = nil
    end
  end
end
if #ARGV >= 4 then
  if #ARGV == 4 then
    if mine[ARGV[4]] and redis.call('LPOS', r.queue, ARGV[4]) then
      mine[ARGV[4]] = nil
    end
  else
    for _, e in ipairs(redis.call('LRANGE', r.queue, 0, -1)) do
      mine[e] = nil
    end
  end
  for i = 4, #ARGV do
    if mine[ARGV[i]] then
      redis.call('RPUSH', r.queue, ARGV[i])
      if s.shape == 'x' and string.sub(s.value, -1) ~= '+' then
        redis.call('APPEND', r.lock, '+') -- mark the lock (see acquire.lua)
        s.value = s.value .. '+'
      elseif s.shape == 'hash' and s.q ~= '1' then
        redis.call('HSET', r.lock, 'q', '1')
        s.q = '1'
      end
    end
  end
  redis.call('PEXPIRE', r.queue, ENTRY_TTL)
  redis.call('SET', r.base .. 'w:' .. id, ARGV[2], 'PX', ENTRY_TTL)
end
if s.shape == 'hash' then
  sweep(r, s, now)
end
local granted
s, granted = fill(r, s, publish, id, now)
for i = 1, #granted, 2 do
  out[#out + 1], out[#out + 2], out[#out + 3] = granted[i], granted[i + 1], 1
end
if #out > 0 then
  table.insert(out, 1, GRANTED)
  return out
end
if free(s) then
  return {BUSY, ''}
end
local held = ''
if s.shape == 'x' then
  held = s.value
end
return {BUSY, held, lease_left(r, s, now or clock(r, s))}
