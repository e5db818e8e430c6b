-- The hand-off: grant gives a resource ("<base>lock", ...) to its head waiters, granted answers
-- the release that did it (doc.go). The state s is {shape = 'none'} or nil (free), {shape =
-- 'x', value} (an exclusive holder, its value marked '+' when waiters may be queued) or {shape
-- = 'hash', kind, q, e, x, t, count} (shared 's' or limited 'l<n>' holders: state.lua).

-- grant gives the resource at lock to the waiters at the head of its queue, in order, while
-- each fits beside the holders of s (swept): anyone when free, a shared waiter beside shared
-- holders, one of the same limit while a slot is free. Each gets a token under its own rules:
-- an exclusive one the lock "<element>:<token>" ('+' if more wait) for its lease, others the
-- field "<element>". A waiter is alive when its Locker is self (the grant comes back in the
-- reply), when the announcement "<element>:<token>" on its Locker's channel reached someone
-- (publish: 'P', 'S', '-' none), or when its Locker's waiter key exists; a dead one is
-- dropped, its token used up. Returns the state after (nil after nil: exclusively held), the
-- grants to self {element, token, ...} (nil: none), and whether any wait.
local function grant(lock, base, s, publish, self, now)
  local queue, mine = base .. 'queue', nil -- mine: made for the first grant to self
  while not s or s.shape ~= 'x' do
    local free = not s or s.shape == 'none' or s.count <= 0
    if not free and (s.q ~= '1' or (s.kind ~= 's' and s.count >= tonumber(string.sub(s.kind, 2)))) then
      return s, mine, s.q == '1' -- nobody queued, or every slot taken: no waiter fits
    end
    local element, more
    if free then
      local two = redis.call('LPOP', queue, 2) -- the head, and whether more wait behind it
      element, more = two and two[1], two and two[2]
      if more and redis.call('LPUSH', queue, more) == 1 then -- a queue made again has no TTL
        redis.call('PEXPIRE', queue, ENTRY_TTL)
      end
    else
      element = redis.call('LINDEX', queue, 0)
    end
    if not element then
      if s and s.shape == 'hash' and s.q ~= '0' then
        redis.call('HSET', lock, 'q', '0')
        s.q = '0'
      end
      return s, mine, false
    end
    local id, lease, kind, rules
    -- #include element.lua
    if not free and id and kind ~= s.kind then
      return s, mine, true -- the head waits for another kind
    elseif not free then
      redis.call('LPOP', queue)
    end
    if id then
      local token, behind = nil, 0
      -- #include token.lua
      local value = element .. ':' .. token
      local alive = id == self
      if not alive and publish ~= '-' then
        alive = redis.call(publish == 'S' and 'SPUBLISH' or 'PUBLISH', base .. 'grant:' .. id, value) > 0
      end
      if alive or redis.call('EXISTS', base .. 'w:' .. id) == 1 then
        if id == self then
          mine = mine or {}
          mine[#mine + 1], mine[#mine + 2] = element, token
        end
        if kind == 'x' then
          if more then
            value = value .. '+'
          end
          redis.call('SET', lock, value, 'PX', lease)
          return s and {shape = 'x', value = value}, mine, true
        else
          -- #include hash.lua
          now = now or clock(lock, s)
          local f, ending, again = element, now + tonumber(lease), false
          if free then
            s = open(lock, kind, '1', f, token, ending, now)
          else
            -- #include hold.lua
          end
        end
      end
    end
  end
  return s, mine, true
end

-- granted returns the reply of a release whose grants to self were mine (grant's) and writes its
-- record at record, unless exact is false (by owner: none): RELEASED, kept as '1' (unless
-- written: the lock became it), or {GRANTED, element, token, ...}, kept as '2:<element>:<token>...'.
local function granted(record, exact, written, mine)
  if not mine then
    if exact and not written then
      redis.call('SET', record, '1', 'PX', RECORD_TTL)
    end
    return RELEASED
  end
  local reply, saved = {GRANTED}, '2'
  for i = 1, #mine, 2 do
    reply[i + 1], reply[i + 2] = mine[i], mine[i + 1]
    saved = saved .. ':' .. mine[i] .. ':' .. mine[i + 1]
  end
  if exact then
    redis.call('SET', record, saved, 'PX', RECORD_TTL)
  end
  return reply
end
