local ENTRY_TTL, RECORD_TTL = 3000, 10000
-- Reset the lease of one holder of a resource if this acquisition still holds it (see lib.lua
-- for the lock's shapes).
-- KEYS[1]: the resource's lock key.
-- ARGV[1]: value: the lock value of this acquisition, "<owner>:<token>".
-- ARGV[2]: lease: the new lease length in milliseconds (a positive integer; never 0, since
--          PEXPIRE 0 would delete the key).
-- ARGV[3]: kind: 'x' (exclusive, the default), 'shared' or a limit n > 1.
-- Returns 1 when extended (still held), 5 when this acquisition no longer holds the resource:
-- another owner (or nobody, or another kind) holds it (the flags of every script, see
-- scripts.go). An exclusive lock's value may carry the mark '+' (waiters queued).
if (ARGV[3] or 'x') == 'x' then
  local held = redis.pcall('GET', KEYS[1]) -- a hash there is not this acquisition's
  if held == ARGV[1] or held == ARGV[1] .. '+' then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return 1
  end
  return 5
end
-- Functions shared by the scripts: scripts.go puts this text where a script's line
-- "-- #include lib.lua" stands, after the script's fast path (Lua creates a script's
-- functions each time it runs), and puts before every script the constants that Go and Lua
-- share, from their Go definitions:
--   ENTRY_TTL:  the lifetime of queue entries and waiter keys, in milliseconds;
--   RECORD_TTL: the lifetime of a release record, in milliseconds.
--
-- A resource is three keys of a script's KEYS, the i-th resource's at 3i-2, 3i-1 and 3i
-- (resource(i)). They share one hash tag, so they live in one Redis Cluster slot:
--   lock:  "<prefix><tag>:lock", who holds the resource, in one of two shapes.
--          A string "<owner>:<token>", followed by '+' when waiters may be queued behind the
--          holder: an exclusive holder, whose lease is the key's TTL.
--          A hash: the field 'limit' holds the holders' kind, 'shared' or a limit n > 1; one
--          field "<owner>:<token>" per holder holds the end of its lease in the server's
--          milliseconds (TIME); 'until' holds when the key expires (server ms), which is set
--          past the latest lease with room to spare, so that most acquisitions and renewals
--          need not move it; 'q' is '1' when waiters may be queued behind the holders (the
--          mark '+' of a string), '0' otherwise.
--   fence: "<prefix><tag>:fence", the resource's token counter.
--   queue: "<prefix><tag>:queue", a list of the queued waiters' elements (see parse), the
--          next to be served at the head.
-- Beside them, by name: each waiting Locker's key "<prefix><tag>:w:<id>" ("<lease
-- ms>:<floor>:<since unix ms>", expiring unless that Locker renews it), its grant channel
-- "<prefix><tag>:grant:<id>", and the release records "<prefix><tag>:r:<owner>:<token>".
--
-- A kind of acquisition is 'x' (exclusive), 'shared' (any number of shared holders, no
-- exclusive one meanwhile) or a limit n > 1 (up to n holders at once), as a string. Tokens are
-- strings too: a Lua number is a double and would round them above 2^53.

-- resource returns the keys of a script's i-th resource, and base, the common part of their
-- names ("<prefix><tag>:").
local function resource(i)
  local lock = KEYS[3 * i - 2]
  return {lock = lock, fence = KEYS[3 * i - 1], queue = KEYS[3 * i], base = string.sub(lock, 1, -5)}
end

-- clock returns the server time in milliseconds.
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- next_token moves the counter at fence and returns the new token. With floor '1', the token
-- is at least the server clock in microseconds; the second result is then how many
-- microseconds the clock is behind the last token, when that is more than a second (the clock
-- stepped back), and 0 otherwise. With expiry other than '0' (milliseconds), the counter
-- expires after that long without a new token.
local function next_token(fence, floor, expiry)
  local token
  local behind = 0
  if floor == '1' then
    local now = redis.call('TIME')
    local f = now[1] .. string.format('%06d', tonumber(now[2]))
    local last = redis.call('GET', fence) or '0'
    if string.sub(last, 1, 1) == '-' or #last < #f or (#last == #f and last < f) then
      redis.call('SET', fence, f)
      token = f
    elseif tonumber(last) - tonumber(f) > 1000000 then
      behind = tonumber(last) - tonumber(f)
    end
  end
  if not token then
    local n = redis.call('INCR', fence)
    if n < 9007199254740992 then
      token = string.format('%d', n)
    else
      token = redis.call('GET', fence)
    end
  end
  if expiry ~= '0' then
    redis.call('PEXPIRE', fence, expiry)
  end
  return token, behind
end

-- parse reads a queue element, "<id>.<n>.<lease ms>" followed by the waiter's rules: 'f' when
-- its tokens are floored at the server clock, 'e<ms>' when its counter expires (which implies
-- the floor), and 's' when it is shared or 'l<n>' when it takes one of n slots (neither:
-- exclusive). It returns the waiting Locker's id, the lease of a grant, and the kind, floor
-- and expiry of the waiter's acquisition, or nil for anything else.
local function parse(element)
  local id, lease, rules = string.match(element, '^([^.]*)%.%d+%.(%d+)(.*)$')
  if not id then
    return nil
  end
  local kind, floor, expiry = 'x', '0', '0'
  if rules ~= '' then
    if string.find(rules, 'f', 1, true) then
      floor = '1'
    end
    local e = string.match(rules, 'e(%d+)')
    if e then
      floor, expiry = '1', e
    end
    if string.find(rules, 's', 1, true) then
      kind = 'shared'
    else
      kind = string.match(rules, 'l(%d+)') or 'x'
    end
  end
  return id, lease, kind, floor, expiry
end

-- holders reads r's lock, whose shape a call of kind expects: nil when nobody holds it;
-- {kind = 'x', value = v} for an exclusive holder; for a hash, a table with the holders'
-- kind, live (their number), fields (theirs), ends (each one's lease end, by field), now
-- (the server time read), expires (the key's 'until') and queued (its mark 'q'), after
-- deleting the fields whose lease ended (changed is then set). One read for the shape
-- expected; a second only for the other. A lock that no live holder keeps is free (see
-- free). seen, when not nil, is what a GET of the lock already answered in this script.
local function holders(r, kind, seen)
  local v, all = seen, nil
  if kind == 'x' then
    if v == nil then
      v = redis.pcall('GET', r.lock)
    end
    if type(v) == 'string' then
      return {kind = 'x', value = v}
    elseif not v then
      return nil
    end
    all = redis.call('HGETALL', r.lock)
  else
    all = redis.pcall('HGETALL', r.lock)
    if all.err then
      return {kind = 'x', value = redis.call('GET', r.lock)}
    elseif #all == 0 then
      return nil
    end
  end
  local now = clock()
  local h = {kind = 'x', live = 0, fields = {}, ends = {}, now = now, expires = 0, writes = {}}
  local gone = {}
  for i = 1, #all, 2 do
    local f, e = all[i], all[i + 1]
    if f == 'limit' then
      h.kind = e
    elseif f == 'until' then
      h.expires = tonumber(e)
    elseif f == 'q' then
      h.queued = e == '1'
    elseif tonumber(e) <= now then
      gone[#gone + 1] = f
    else
      h.live = h.live + 1
      h.fields[#h.fields + 1] = f
      h.ends[f] = tonumber(e)
    end
  end
  if #gone > 0 then
    redis.call('HDEL', r.lock, unpack(gone))
    h.changed = true
  end
  return h
end

-- free reports whether holders h leave the resource free: nobody holds it, the exclusive
-- holder released it (h.gone: its key is deleted by fill or settle), or no live holder is left
-- in the hash.
local function free(h)
  return not h or h.gone or (h.live == 0)
end

-- admits reports whether an acquisition of kind may join holders h.
local function admits(h, kind)
  if free(h) then
    return true
  end
  if h.kind == 'x' or h.kind ~= kind then
    return false
  end
  return kind == 'shared' or h.live < tonumber(kind)
end

-- mismatch returns the kind of holders h when an acquisition of kind can never join them,
-- not even by waiting: exclusive and shared acquisitions wait for each other, but a limit n
-- mixes with no other kind while its holders live ('1' names an exclusive holder). Returns
-- nil otherwise.
local function mismatch(h, kind)
  if free(h) or h.kind == kind then
    return nil
  end
  local rw = kind == 'x' or kind == 'shared'
  if rw and (h.kind == 'x' or h.kind == 'shared') then
    return nil
  end
  if h.kind == 'x' then
    return '1'
  end
  return h.kind
end

-- lease_left returns, for holders h that are not free, how long until the resource can change
-- hands in milliseconds: the exclusive holder's remaining lease, the latest lease of shared
-- holders, the earliest of a limit's holders (a slot frees).
local function lease_left(r, h)
  if h.kind == 'x' then
    return redis.call('PTTL', r.lock)
  end
  local pick
  for _, e in pairs(h.ends) do
    if not pick or (h.kind == 'shared' and e > pick) or (h.kind ~= 'shared' and e < pick) then
      pick = e
    end
  end
  return pick - h.now
end

-- hold gives (or renews) the hash holder field f a lease that ends at the server millisecond
-- ending; settle writes it.
local function hold(h, f, ending)
  if not h.ends[f] then
    h.live = h.live + 1
    h.fields[#h.fields + 1] = f
  end
  h.ends[f] = ending
  h.changed = true
  h.writes[#h.writes + 1] = f
  h.writes[#h.writes + 1] = string.format('%d', ending)
end

-- drop removes the hash holder field f; with no holder left, settle deletes the key instead.
local function drop(r, h, f)
  h.ends[f] = nil
  h.live = h.live - 1
  h.changed = true
  if h.live > 0 then
    redis.call('HDEL', r.lock, f)
  end
end

-- open returns new hash holders of kind for a free resource, deleting what its lock key
-- holds (a released exclusive lock, a hash left with no live holder).
local function open(r, h, kind)
  if h then
    redis.call('DEL', r.lock)
  end
  return {kind = kind, live = 0, fields = {}, ends = {}, now = (h and h.now) or clock(), expires = 0, writes = {'limit', kind}}
end

-- settle writes what changed of holders h, in one HSET and, when the latest lease passes the
-- key's expiry, one PEXPIRE: a released exclusive lock is deleted; a hash gets its new fields,
-- its mark (h.mark: true or false, set by fill) and an expiry past its latest lease, or is
-- deleted with no holder left.
local function settle(r, h)
  if not h or not (h.changed or h.gone or h.mark ~= nil) then
    return
  end
  if h.gone or h.live <= 0 then
    redis.call('DEL', r.lock)
    return
  end
  if h.kind == 'x' then
    return
  end
  local w = h.writes
  if h.mark ~= nil and h.mark ~= (h.queued or false) then
    w[#w + 1] = 'q'
    w[#w + 1] = h.mark and '1' or '0'
  end
  local last = 0
  for _, e in pairs(h.ends) do
    if e > last then
      last = e
    end
  end
  local expire = last > h.expires
  if expire then
    h.expires = 2 * last - h.now -- room for as long again
    w[#w + 1] = 'until'
    w[#w + 1] = string.format('%d', h.expires)
  end
  if #w > 0 then
    redis.call('HSET', r.lock, unpack(w))
  end
  if expire then
    redis.call('PEXPIRE', r.lock, string.format('%d', h.expires - h.now))
  end
end

-- fill grants r's lock to the waiters at the head of its queue, in order, while each fits
-- what holders h leave: anyone when free, shared waiters beside shared holders, waiters of the
-- same limit while a slot is free, nobody beside an exclusive holder. Each grant takes a new
-- token under the waiter's own rules (see parse) and, for an exclusive waiter, sets the lock
-- to "<element>:<token>+" with the element's lease; a hash holder gets the field
-- "<element>:<token>". A waiter is alive when its Locker is self (the grant then comes back
-- in the result, unannounced), when the announcement of "<element>:<token>" on its Locker's
-- channel reached a subscriber (publish: 'P' PUBLISH, 'S' SPUBLISH, '-' nothing), or else
-- when its Locker's waiter key exists; dead waiters are dropped (each costs a token). Returns
-- the holders (new ones when the resource was free and something was granted), the grants to
-- self as a list {element, token, ...}, and whether waiters may be left in the queue.
local function fill(r, h, publish, self)
  local mine = {}
  while not (h and h.kind == 'x' and not h.gone) do
    local element
    if free(h) then
      if h and h.live == 0 and h.queued == false then
        return h, mine, false -- the last holder of a hash left, and nobody was queued
      end
      element = redis.call('LPOP', r.queue)
    elseif h.queued == false and h.mark == nil then
      return h, mine, false -- a hash marked with nobody queued
    elseif h.kind ~= 'shared' and h.live >= tonumber(h.kind) then
      return h, mine, true -- every slot taken: no waiter fits, the queue is left unread
    else
      element = redis.call('LINDEX', r.queue, 0)
      if element then
        local _, _, kind = parse(element)
        if kind and not admits(h, kind) then
          h.mark = true
          return h, mine, true
        end
        redis.call('LPOP', r.queue)
      end
    end
    if not element then
      if h and h.kind ~= 'x' then
        h.mark = false
      end
      return h, mine, false
    end
    local id, lease, kind, floor, expiry = parse(element)
    if id then
      local token = next_token(r.fence, floor, expiry)
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
          redis.call('SET', r.lock, value .. '+', 'PX', lease)
          h = {kind = 'x', value = value .. '+'}
        else
          if free(h) then
            h = open(r, h, kind)
            h.queued = true -- popped from a queue: more may follow
          end
          hold(h, value, h.now + tonumber(lease))
        end
        if id == self then
          mine[#mine + 1] = element
          mine[#mine + 1] = token
        end
      end
    end
  end
  return h, mine, true
end
local now = clock()
local got = redis.pcall('HMGET', KEYS[1], ARGV[1], 'until')
if got.err or not got[1] or tonumber(got[1]) <= now then
  return 5
end
local ending = now + tonumber(ARGV[2])
if ending <= tonumber(got[2] or '0') then
  redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', ending))
  return 1
end
-- Past the key's expiry: move it on, with room for as long again (see lib.lua).
local expires = 2 * ending - now
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', ending), 'until', string.format('%d', expires))
redis.call('PEXPIRE', KEYS[1], string.format('%d', expires - now))
return 1
