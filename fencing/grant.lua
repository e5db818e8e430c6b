-- Functions shared by the scripts that can hand a free lock to the next waiter: the text of
-- this file is put in front of acquire.lua, release.lua and poll.lua. They expect
-- KEYS[1]: the lock key; its value is "<owner>:<token>".
-- KEYS[2]: the fence key: the resource's token counter.
-- KEYS[3]: the queue key: a list with one element per queued waiter, "<Locker id>.<n>", the
--          next to be served at the head. The key "<KEYS[3] less 'queue'>w:<id>" of each
--          waiting Locker holds "<lease ms>:<floor 0|1>:<since unix ms>" and expires unless
--          that Locker renews it: an element whose Locker key is gone is a dead waiter. All
--          these keys share one hash tag, so they live in one Redis Cluster slot.

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
  if expiry and expiry ~= '' then
    redis.call('PEXPIRE', KEYS[2], expiry)
  end
  return token, behind
end

-- locker_of returns the Locker id of a queue element.
local function locker_of(element)
  return string.match(element, '^[^.]*')
end

-- waiter_key returns the key of a waiting Locker.
local function waiter_key(id)
  return string.sub(KEYS[3], 1, #KEYS[3] - 5) .. 'w:' .. id
end

-- grant_next hands the free lock to the waiter at the head of the queue: it sets the lock to
-- "<element>:<token>" with the lease that the waiter's Locker asked for and announces that
-- value on channel with publish ('PUBLISH' or 'SPUBLISH'; '' sends nothing). Dead waiters at
-- the head are dropped on the way. self is the calling Locker's id and self_entry its waiter
-- value: it is not notified (the caller gets the grant in the reply) and its key need not be
-- read. Returns {element, token}, or nil when nobody waits. expiry is the counter's expiry, as
-- in next_token.
local function grant_next(channel, publish, self, self_entry, expiry)
  while true do
    local element = redis.call('LPOP', KEYS[3])
    if not element then
      return nil
    end
    local id = locker_of(element)
    local entry
    if id == self and self_entry ~= '' then
      entry = self_entry
    else
      entry = redis.call('GET', waiter_key(id))
    end
    if entry then
      local lease, floor = string.match(entry, '^(%d+):([01])')
      if lease then
        local token = next_token(floor, expiry)
        local value = element .. ':' .. token
        redis.call('SET', KEYS[1], value, 'PX', lease)
        if id ~= self and publish ~= '' then
          redis.call(publish, channel, value)
        end
        return {element, token}
      end
    end
  end
end
