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
-- #include grants.lua
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
