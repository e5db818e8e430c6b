local GRANTED, RELEASED, NOT_HELD, LAYOUT, META, ENTRY_TTL, RECORD_TTL = 2, 4, 5, 7, 5, '3000', '10000'
-- Release one or several resources of one acquisition, each if the acquisition still holds
-- it, and hand each to the next waiters of its queue in the same step (see doc.go for the keys
-- and values, grants.lua for the states and the grants).
-- KEYS: the lock key of each resource, n of them; on a Cluster they share one slot, and each
--       resource's fence and queue keys (and with one resource, its memo's) follow them,
--       declared only (see wire.Declare).
-- ARGV[1..n]: value: the lock value of the i-th resource's holder, "<owner>:<token>"; or
--          "<owner>:" for whatever token that owner holds (after an acquire whose reply was
--          lost).
-- ARGV[n+1]: kind: the holders' kind: 'x' (exclusive, the default), 'k' (exclusive, with a
--          lease of less than RECORD_TTL left: its record is kept RECORD_TTL, see below), 's'
--          or 'l<n>'.
-- ARGV[n+2]: publish: 'P' (the default), 'S' or '-' (see acquire.lua).
-- ARGV[n+3]: self: the releasing Locker's id when it has waiters queued for these resources
--          (grants to them come back in the reply, unannounced), or '' (the default).
-- With one resource, a memo written with the release, only while ARGV[1] holds it:
-- ARGV[5]: its name ('' for none), ARGV[6] its value, ARGV[7] its lifetime in milliseconds;
-- ARGV[8]: an expiry in milliseconds that the same step gives the resource's counter unless it
--          has one ('0' for none).
-- Trailing arguments are left out when they have their defaults.
-- Returns, for one resource: RELEASED when released and nothing granted to the Locker self;
-- {GRANTED, element, token, ...} when also granted to those queue elements of self, with those
-- tokens; NOT_HELD when ARGV[1] does not hold it; LAYOUT for a hash of the earlier layout
-- (nothing changed). For several resources, an array of those replies, in KEYS order.
-- The release record "<base>r:<value>" (not for "<owner>:") keeps the reply for a call sent
-- again after a lost reply, which, finding the lock gone or handed on, answers as the first
-- run did ('1' or the lock value for RELEASED, '2:<element>:<token>...' for grants to self)
-- instead of NOT_HELD: an exclusive lock becomes its record (RENAME), which keeps the lease's
-- TTL, or RECORD_TTL when that is shorter (kind 'k'); other records live RECORD_TTL.
local n = #KEYS
if n > 1 then -- on a Cluster the resources' other keys follow their lock keys (wire.Declare)
  local i = 1
  while i < n and string.sub(KEYS[i + 1], -5) == ':lock' do
    i = i + 1
  end
  n = i
end
local kind = ARGV[n + 1] or 'x'
-- The fast paths of one holder that nobody waits behind: nothing else is read or created.
local seen
local handed = false -- released below, its record written, but its head waiter was dead
if n == 1 then
  if kind == 'x' or kind == 'k' then
    seen = redis.pcall('GET', KEYS[1])
    if seen == ARGV[1] then
      local base = string.sub(KEYS[1], 1, -5)
      if ARGV[5] and ARGV[5] ~= '' then
        redis.call('SET', base .. ARGV[5], ARGV[6], 'PX', ARGV[7])
      end
      if ARGV[8] and ARGV[8] ~= '0' then
        redis.call('PEXPIRE', base .. 'fence', ARGV[8], 'NX')
      end
      local record = base .. 'r:' .. ARGV[1]
      redis.call('RENAME', KEYS[1], record)
      if kind == 'k' then
        redis.call('PEXPIRE', record, RECORD_TTL)
      end
      return RELEASED
    elseif type(seen) == 'string' and #seen == #ARGV[1] + 1 and string.byte(seen, -1) == 43 and
        string.find(seen, ARGV[1], 1, true) == 1 then -- "<value>+"
      -- Waiters queued behind this holder: when the head one is an exclusive waiter with the
      -- default rules, hand it the lock here (see fill in grants.lua for the general case).
      local base = string.sub(KEYS[1], 1, -5)
      local queue = base .. 'queue'
      -- The head and the one after it, if any: whether waiters are left to mark the lock.
      local heads = redis.call('LPOP', queue, 2)
      local element, more = heads and heads[1], heads and heads[2]
      -- A push into the queue that the LPOP emptied makes it again, without its TTL.
      if more and redis.call('LPUSH', queue, more) == 1 then
        redis.call('PEXPIRE', queue, ENTRY_TTL)
      end
      local id, lease, rules
      if element then
        id, lease, rules = string.match(element, '^([^.]*)%.%d+%.(%d+)(.*)$')
      end
      if id and rules == '' then
        if ARGV[5] and ARGV[5] ~= '' then
          redis.call('SET', base .. ARGV[5], ARGV[6], 'PX', ARGV[7])
        end
        if ARGV[8] and ARGV[8] ~= '0' then
          redis.call('PEXPIRE', base .. 'fence', ARGV[8], 'NX')
        end
        local record = base .. 'r:' .. ARGV[1]
        redis.call('RENAME', KEYS[1], record)
        if kind == 'k' then
          redis.call('PEXPIRE', record, RECORD_TTL)
        end
        local n = redis.call('INCR', base .. 'fence')
        local token = n < 9007199254740992 and string.format('%d', n) or redis.call('GET', base .. 'fence')
        local value = element .. ':' .. token
        local self, publish = ARGV[4] or '', ARGV[3] or 'P'
        local alive = id == self
        if not alive and publish ~= '-' then
          alive = redis.call(publish == 'S' and 'SPUBLISH' or 'PUBLISH', base .. 'grant:' .. id, value) > 0
        end
        if alive or redis.call('EXISTS', base .. 'w:' .. id) == 1 then
          redis.call('SET', KEYS[1], more and value .. '+' or value, 'PX', lease)
          if id == self then
            redis.call('SET', record, '2:' .. value, 'PX', RECORD_TTL)
            return {GRANTED, element, token}
          end
          return RELEASED
        end
        -- A dead waiter (its token is used up): the general case serves the rest.
        handed = true
      elseif element and redis.call('LPUSH', queue, element) == 1 then -- put back: the general case serves it
        redis.call('PEXPIRE', queue, ENTRY_TTL)
      end
    end
  else
    local owner, token = string.match(ARGV[1], '^([^:]*):(%d+)$')
    local h = owner and redis.pcall('HMGET', KEYS[1], owner, 'q', 't')
    if h and not h.err and h[1] and h[2] == '0' and string.match(h[1], ':(%d+)$') == token then
      local left = redis.call('PTTL', KEYS[1])
      if left >= 0 and tonumber(string.match(h[1], '^%d+')) > tonumber(h[3]) - left then
        local base = string.sub(KEYS[1], 1, -5)
        if ARGV[5] and ARGV[5] ~= '' then
          redis.call('SET', base .. ARGV[5], ARGV[6], 'PX', ARGV[7])
        end
        if ARGV[8] and ARGV[8] ~= '0' then
          redis.call('PEXPIRE', base .. 'fence', ARGV[8], 'NX')
        end
        redis.call('HDEL', KEYS[1], owner)
        redis.call('SET', base .. 'r:' .. ARGV[1], '1', 'PX', RECORD_TTL)
        return RELEASED
      end
    end
  end
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
local publish, self = ARGV[n + 2] or 'P', ARGV[n + 3] or ''

-- commit writes what the call commits with the release of its one resource r.
local function commit(r)
  if n == 1 and ARGV[5] and ARGV[5] ~= '' then
    redis.call('SET', r.base .. ARGV[5], ARGV[6], 'PX', ARGV[7])
  end
  if n == 1 and ARGV[8] and ARGV[8] ~= '0' then
    redis.call('PEXPIRE', r.fence, ARGV[8], 'NX')
  end
end

-- finish returns the reply of a release with the record key record, which granted the resource to mine
-- ({element, token, ...}) of this Locker's waiters, and writes its record: for a grant to
-- self, or when not written already (written: an exclusive lock became it).
local function finish(record, exact, written, mine)
  if #mine == 0 then
    if exact and not written then
      redis.call('SET', record, '1', 'PX', RECORD_TTL)
    end
    return RELEASED
  end
  local reply, saved = {GRANTED}, '2'
  for i = 1, #mine, 2 do
    reply[#reply + 1], reply[#reply + 2] = mine[i], mine[i + 1]
    saved = saved .. ':' .. mine[i] .. ':' .. mine[i + 1]
  end
  if exact then
    redis.call('SET', record, saved, 'PX', RECORD_TTL)
  end
  return reply
end

-- release releases value on r, whose release record is record, and returns its reply; got is
-- what a GET of its lock answered.
local function release(r, value, record, got)
  local exact = string.sub(value, -1) ~= ':'
  local owner = string.match(value, '^[^:]*')
  local s = state(r, got, owner)
  local now
  local held = false
  if s.shape == 'old' then
    return LAYOUT
  elseif s.shape == 'x' then
    local v = s.value
    if string.sub(v, -1) == '+' then
      v = string.sub(v, 1, -2)
    end
    held = v == value or (not exact and string.sub(v, 1, #value) == value)
  elseif s.shape == 'hash' then
    now = clock(r, s)
    local f = s.mine
    if f then
      local ending, token = string.match(f, '^(%d+):(%d+)$')
      held = (not exact or owner .. ':' .. token == value) and tonumber(ending) > now
    end
  end
  if not held then
    local first = exact and redis.call('GET', record)
    if not first then
      return NOT_HELD
    elseif string.sub(first, 1, 2) ~= '2:' then
      return RELEASED
    end
    local reply = {GRANTED}
    for e, t in string.gmatch(first, ':([^:]+):(%d+)') do
      reply[#reply + 1], reply[#reply + 2] = e, t
    end
    return reply
  end
  commit(r)
  local written = false -- the record answers RELEASED already
  if s.shape == 'x' then
    -- The lock becomes the record of its release.
    if exact then
      redis.call('RENAME', r.lock, record)
      if kind == 'k' then
        redis.call('PEXPIRE', record, RECORD_TTL)
      end
      written = true
    else
      redis.call('DEL', r.lock)
    end
    if string.sub(s.value, -1) ~= '+' then
      return RELEASED -- unmarked: nobody queued behind this holder
    end
    s = {shape = 'none'}
  else
    redis.call('HDEL', r.lock, owner)
    s.count = s.count - 1
    if s.q ~= '1' then
      if exact then
        redis.call('SET', record, '1', 'PX', RECORD_TTL)
      end
      return RELEASED
    end
    sweep(r, s, now)
  end
  local mine
  s, mine = fill(r, s, publish, self, now)
  return finish(record, exact, written, mine)
end

if n == 1 then
  if handed then
    local r = resource(KEYS[1])
    local _, mine = fill(r, {shape = 'none'}, publish, self)
    return finish(r.base .. 'r:' .. ARGV[1], true, true, mine)
  end
  local r = resource(KEYS[1])
  return release(r, ARGV[1], r.base .. 'r:' .. ARGV[1], seen)
end
local out = {}
for i = 1, n do
  local r = resource(KEYS[i])
  out[i] = release(r, ARGV[i], r.base .. 'r:' .. ARGV[i])
end
return out
