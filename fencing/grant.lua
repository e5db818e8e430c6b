-- Functions shared by the scripts that can hand a free lock to the next waiter: the text of
-- this file replaces the line "-- #include grant.lua" of acquire.lua, release.lua and
-- poll.lua, after their uncontended paths. They expect
-- KEYS[1]: the lock key, "<prefix><tag>:lock"; its value is "<owner>:<token>", followed by
--          '+' when waiters may be queued behind the holder (queued is then set): a release
--          of an unmarked lock need not look at the queue.
-- KEYS[2]: the fence key, "<prefix><tag>:fence": the resource's token counter.
-- KEYS[3]: the queue key, "<prefix><tag>:queue": a list with one element per queued waiter,
--          "<Locker id>.<n>.<lease ms>[f]" (see grant_next), the next to be served at the
--          head. The key "<prefix><tag>:w:<id>" of each waiting Locker holds "<lease
--          ms>:<floor 0|1>:<since unix ms>" and expires unless that Locker renews it: an
--          element whose Locker key is gone, and whose announcement nobody heard, is a dead
--          waiter. All these keys share one hash tag, so they live in one Redis
--          Cluster slot.
-- The scripts take their settings in one argument, opts: "<publish><floor><expiry>", where
-- publish is 'P' (announce grants with PUBLISH on "<prefix><tag>:grant"), 'S' (SPUBLISH) or
-- '-' (announce nothing), floor is '1' to keep new tokens at or above the server clock in
-- microseconds or '0', and expiry is the counter's expiry in milliseconds, or nothing.

-- ENTRY_TTL is the lifetime of queue entries in milliseconds, the same for every Locker.
local ENTRY_TTL = 3000

-- next_token moves the counter and returns the new token as a string (a Lua number is a
-- double and would round it above 2^53). With floor '1', the token is at least the server
-- clock in microseconds; the second result is then how many microseconds the clock is behind
-- the last token, when that is more than a second (the clock stepped back), and 0 otherwise.
-- With expiry set (milliseconds), the counter expires after that long without a new token.
local function next_token(floor, expiry)
  local token
  local behind = 0
  if floor == '1' then
    local now = redis.call('TIME')
    local f = now[1] .. string.format('%06d', tonumber(now[2]))
    local last = redis.call('GET', KEYS[2]) or '0'
    if string.sub(last, 1, 1) == '-' or #last < #f or (#last == #f and last < f) then
      redis.call('SET', KEYS[2], f)
      token = f
    elseif tonumber(last) - tonumber(f) > 1000000 then
      behind = tonumber(last) - tonumber(f)
    end
  end
  if not token then
    local n = redis.call('INCR', KEYS[2])
    if n < 9007199254740992 then
      token = string.format('%d', n)
    else
      token = redis.call('GET', KEYS[2])
    end
  end
  if expiry ~= '' then
    redis.call('PEXPIRE', KEYS[2], expiry)
  end
  return token, behind
end

-- settings returns the floor ('0' or '1') and the counter's expiry ('' or milliseconds) of
-- opts. The usual settings, no floor and no expiry, are told by comparing opts whole, which
-- costs Redis less than string.sub.
local function settings(opts)
  if opts == 'P0' or opts == 'S0' or opts == '-0' then
    return '0', ''
  end
  return string.sub(opts, 2, 2), string.sub(opts, 3)
end

-- locker_of returns the Locker id of a queue element.
local function locker_of(element)
  return string.match(element, '^[^.]*')
end

-- waiter_key returns the key of a waiting Locker.
local function waiter_key(id)
  return string.sub(KEYS[3], 1, -6) .. 'w:' .. id
end

-- grant_next hands the free lock to the waiter of element, just popped from the head of
-- the queue, or if it is dead to the next live one: it sets the lock to "<element>:<token>+"
-- with the lease the element names and announces "<element>:<token>" as opts says, on
-- "<prefix><tag>:grant:<id>", the channel of the waiter's Locker alone, so that no other
-- waiting Locker is woken. An element is "<id>.<n>.<lease ms>", followed by 'f' when the
-- waiter wants tokens floored at the server clock; "<id>.<n>" (fencekit 0.x before the lease
-- moved into the element) takes both from the waiter key. A waiter is alive when its Locker is
-- the caller (self: it gets the grant in the reply, unannounced), when the announcement
-- reached a subscriber, or else when its Locker's waiter key exists. Dead waiters are dropped
-- on the way; each costs a token. Returns {element, token}, or nil when nobody waits. give,
-- when set, records the grant instead of the SET: give(value, lease ms) (see limit.lua).
local function grant_next(element, opts, self, give)
  local _, expiry = settings(opts)
  local publish = string.sub(opts, 1, 1)
  -- announce publishes value to the waiters of Locker id and returns how many heard it.
  local function announce(id, value)
    if id == self or publish == '-' then
      return 0
    end
    local channel = string.sub(KEYS[3], 1, -6) .. 'grant:' .. id
    return redis.call(publish == 'S' and 'SPUBLISH' or 'PUBLISH', channel, value)
  end
  while element do
    local id, lease, floor = string.match(element, '^([^.]*)%.%d+%.(%d+)(f?)$')
    local alive = false
    if not id then -- the older form: the waiter key says lease and floor, and that it lives
      id = locker_of(element)
      local entry = redis.call('GET', waiter_key(id))
      if entry then
        lease, floor = string.match(entry, '^(%d+):([01])')
        floor, alive = floor == '1' and 'f' or '', true
      end
    end
    if lease then
      local token = next_token(floor == 'f' and '1' or '0', expiry)
      local value = element .. ':' .. token
      alive = alive or id == self
      if alive then
        announce(id, value)
      else
        alive = announce(id, value) > 0 or redis.call('EXISTS', waiter_key(id)) == 1
      end
      if alive then
        if give then
          give(value, lease)
        else
          redis.call('SET', KEYS[1], value .. '+', 'PX', lease)
        end
        return {element, token}
      end
    end
    element = redis.call('LPOP', KEYS[3])
  end
  return nil
end
