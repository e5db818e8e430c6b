-- The general path of the acquire and release scripts: every kind, every state (grant.lua).
-- #include grant.lua
-- #include hash.lua

-- resource returns the keys of the resource whose lock key is lock.
local function resource(lock)
  local base = string.sub(lock, 1, -5)
  return {lock = lock, queue = base .. 'queue', base = base}
end

-- state reads r's holders: GET for an exclusive one or nobody (seen: what a GET answered
-- already), else the hash's meta and the field named owner (mine); 'old': the earlier layout.
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
  return {shape = 'hash', kind = h[1], q = h[2], e = tonumber(h[3]), x = tonumber(h[4]), t = tonumber(h[5]),
    count = redis.call('HLEN', r.lock) - META, mine = owner and h[7]}
end

-- sweep, when a holder of hash state s may have ended by now (past s.e), deletes those that
-- did and sets s.count, e and x from the others; with none left, the key, and s is 'none'.
local function sweep(r, s, now)
  if s.shape ~= 'hash' or s.count <= 0 or now < s.e then
    return
  end
  local all = redis.call('HGETALL', r.lock)
  local gone, e, x, count = {}, nil, 0, 0
  for i = 1, #all, 2 do
    if #all[i] > 1 then -- a holder: the one-letter fields are the hash's own
      local ending = tonumber(string.match(all[i + 1], '^%d+'))
      if ending <= now then
        gone[#gone + 1] = all[i]
      else
        count, e, x = count + 1, math.min(e or ending, ending), math.max(x, ending)
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
  redis.call('HSET', r.lock, 'e', string.format('%d', e), 'x', string.format('%d', x))
end

-- free reports whether nobody holds the resource of s (swept).
local function free(s)
  return s.shape == 'none' or (s.shape == 'hash' and s.count <= 0)
end

-- lease_left returns how long until the holders of s let the resource change hands (ms): the
-- exclusive holder's lease, the latest of shared holders', the earliest of a limit's.
local function lease_left(r, s, now)
  if s.shape == 'x' then
    return redis.call('PTTL', r.lock)
  elseif s.kind == 's' then
    return s.x - now
  end
  return s.e - now
end

-- acquire takes r for owner as kind ('x', 's', 'l<n>'), or queues element (acquire.lua's
-- arguments and replies). The queue is served first: a newcomer never goes ahead of a waiter.
-- The counter moves before the lock is written: a failing INCR (int64 max) leaves no lock.
local function acquire(r, kind, owner, lease, rules, element, entry, publish)
  local s = state(r, nil, owner)
  local now
  if s.shape == 'old' then
    return {LAYOUT}
  elseif s.shape == 'x' and string.sub(s.value, 1, #owner + 1) == owner .. ':' then
    redis.call('PEXPIRE', r.lock, lease) -- a call sent again: a write, for a WAIT after it
    return string.match(s.value, '^%d+', #owner + 2)
  elseif s.shape == 'hash' then
    now = clock(r.lock, s)
    if s.mine then -- a call sent again
      local token = string.match(s.mine, ':(%d+)$')
      local lock, f, ending, again = r.lock, owner, now + tonumber(lease), true
      -- #include hold.lua
      return token
    end
    sweep(r, s, now)
  end
  local have = s.shape == 'x' and 'x' or s.kind -- a limit mixes with no other kind while held
  if not free(s) and have ~= kind and not ((kind == 'x' or kind == 's') and (have == 'x' or have == 's')) then
    return {MISMATCH, have}
  end
  -- Served first: EXISTS before LPOP, as under maxmemory Redis refuses a script's INCR only
  -- while it has not written yet, and LPOP counts as a write even on a missing key.
  local queued = s.shape == 'x'
  if s.shape == 'hash' and not free(s) then
    queued = s.q == '1'
  elseif not queued then
    queued = redis.call('EXISTS', r.queue) == 1
  end
  if queued then
    local _
    s, _, queued = grant(r.lock, r.base, s, publish, '', now)
  end
  local fits = free(s) or (s.shape == 'hash' and s.kind == kind and (kind == 's' or s.count < tonumber(string.sub(kind, 2))))
  if not queued and fits then
    local base, token, behind = r.base, nil, 0
    -- #include token.lua
    if kind == 'x' then
      redis.call('SET', r.lock, owner .. ':' .. token, 'PX', lease)
    else
      now = now or clock(r.lock, s)
      if free(s) then
        open(r.lock, kind, '0', owner, token, now + tonumber(lease), now)
      else
        local lock, f, ending, again = r.lock, owner, now + tonumber(lease), false
        -- #include hold.lua
      end
    end
    if behind > 0 then
      return {TAKEN, token, behind}
    end
    return token
  end
  if s.shape == 'hash' then
    now = now or clock(r.lock, s)
  end
  if element == '' then
    return {BUSY, lease_left(r, s, now)}
  end
  local lock, base, held, q = r.lock, r.base, s.shape == 'x' and s.value, s.q
  -- #include join.lua
  return {QUEUED, held or '', lease_left(r, s, now)}
end

-- release frees r of value (or "<owner>:", whatever token the owner holds, keeping no
-- record), with the memo of arguments from m on (m false: none), and grants r to the next
-- waiters; keep as in retire.lua. Returns release.lua's reply. A value that does not hold r
-- finds its record (a call sent again after a lost reply) and answers as the first run did.
local function release(r, value, keep, publish, self, m)
  local exact = string.sub(value, -1) ~= ':'
  local owner = string.match(value, '^[^:]*')
  local record = r.base .. 'r:' .. value
  local s = state(r, nil, owner)
  local now
  local held = false
  if s.shape == 'old' then
    return LAYOUT
  elseif s.shape == 'x' then
    local v = s.value
    if string.byte(v, -1) == 43 then -- '+'
      v = string.sub(v, 1, -2)
    end
    held = v == value or (not exact and string.sub(v, 1, #value) == value)
  elseif s.shape == 'hash' and s.mine then
    now = clock(r.lock, s)
    local ending, token = string.match(s.mine, '^(%d+):(%d+)$')
    held = (not exact or owner .. ':' .. token == value) and tonumber(ending) > now
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
  local written = exact and s.shape == 'x' -- the lock becomes its record
  if written then
    local lock, base = r.lock, r.base
    -- #include retire.lua
  elseif m then
    local base = r.base
    -- #include memo.lua
  end
  if s.shape == 'x' then
    if not exact then
      redis.call('DEL', r.lock)
    end
    if string.byte(s.value, -1) ~= 43 then -- unmarked: nobody queued behind it
      return RELEASED
    end
    s = {shape = 'none'}
  else
    redis.call('HDEL', r.lock, owner)
    s.count = s.count - 1
    if s.q ~= '1' then
      return granted(record, exact, false)
    end
    sweep(r, s, now)
  end
  local _, mine = grant(r.lock, r.base, s, publish, self, now)
  return granted(record, exact, written, mine)
end
