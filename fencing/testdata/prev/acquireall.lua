local BUSY, TAKEN, MISMATCH, LAYOUT, META = 0, 1, 6, 7, 5
-- Take the exclusive locks of several resources in one step and issue a fencing token for
-- each, as far as they are free, in the order given (the canonical order, see lockset.go; see
-- doc.go for the keys and values).
-- KEYS: the lock key of each resource; on a Cluster they share one slot, and each resource's
--       fence and queue keys follow them, declared only (see wire.Declare).
-- ARGV[1]: owner: the set's owner value, random and unique per call, without ':' or '.'; each
--          lock's value is "<owner>:<token>".
-- ARGV[2]: lease: the lease in milliseconds (a positive integer).
-- ARGV[3]: floor: '1' or '0' (the default), as in acquire.lua.
-- ARGV[4]: expiry: the counter's expiry in milliseconds, or '0' (the default).
-- A resource is free when nobody holds it (or only holders whose lease ended) and nobody is
-- queued for it: a set never takes a lock ahead of the waiters of its queue (the caller then
-- waits in that queue). A lock that ARGV[1] already holds (a call sent again) counts as
-- taken, with its token, and its lease is reset.
-- Returns {TAKEN, behind, token1, ..., tokenN} when every lock was taken; {BUSY, k, left,
-- token1, ..., tokenk} when the (k+1)-th resource is not free: the first k were taken, the
-- rest were not touched; left is as lease_left says for its holders, or -2 when it is free but
-- waiters are queued; {MISMATCH, k, kind, token1, ..., tokenk} instead when its live holders
-- hold it with a limit (kind), which an exclusive lock never joins; {LAYOUT, k, '', ...} for a
-- hash of the earlier layout. behind is the largest number of microseconds by which the server
-- clock was behind a resource's last token (see next_token), or 0. Every counter moves before
-- its lock is set, so a failing INCR leaves no lock for that resource.
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
local mine = ARGV[1] .. ':'
local floor, expiry = ARGV[3] or '0', ARGV[4] or '0'
local tokens = {}
local most = 0
local function stop(reply)
  for j = 1, #tokens do
    reply[j + 3] = tokens[j]
  end
  return reply
end
local n = #KEYS
while string.sub(KEYS[n], -5) ~= ':lock' do -- on a Cluster, the other keys follow (wire.Declare)
  n = n - 1
end
for i = 1, n do
  local r = resource(KEYS[i])
  local t
  if redis.call('EXISTS', r.lock, r.queue) == 0 then
    local behind
    t, behind = next_token(r, floor, expiry)
    most = math.max(most, behind)
    redis.call('SET', r.lock, mine .. t, 'PX', ARGV[2])
  else
    local s = state(r)
    if s.shape == 'old' then
      return stop({LAYOUT, i - 1, ''})
    elseif s.shape == 'x' and string.sub(s.value, 1, #mine) == mine then
      redis.call('PEXPIRE', r.lock, ARGV[2])
      t = string.match(s.value, '^%d+', #mine + 1)
    else
      local now = clock(r, s)
      sweep(r, s, now)
      if free(s) and redis.call('EXISTS', r.queue) == 0 then
        local behind
        t, behind = next_token(r, floor, expiry)
        most = math.max(most, behind)
        redis.call('SET', r.lock, mine .. t, 'PX', ARGV[2])
      elseif mismatch(s, 'x') then
        return stop({MISMATCH, i - 1, s.kind})
      else
        return stop({BUSY, i - 1, free(s) and -2 or lease_left(r, s, now)})
      end
    end
  end
  tokens[i] = t
end
local reply = {TAKEN, most}
for j = 1, #tokens do
  reply[j + 2] = tokens[j]
end
return reply
