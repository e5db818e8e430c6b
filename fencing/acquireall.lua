-- Take the locks of several resources in one step and issue a fencing token for each, as far
-- as they are free, in the order given (the canonical order, see lockset.go).
-- KEYS: three per resource, the i-th resource's at KEYS[3i-2], KEYS[3i-1] and KEYS[3i]: its
--       lock, fence and queue keys (see grant.lua). On a Cluster they all share one slot.
-- ARGV[1]: the owner value of the set, random and unique per call, without ':'; each lock's
--          value is "<owner>:<token>".
-- ARGV[2]: the lease length in milliseconds (a positive integer).
-- ARGV[3]: opts (see grant.lua).
-- A resource is free when its lock does not exist and nobody is queued for it: a set never
-- takes a lock ahead of the waiters of its queue (the caller then waits in that queue). A lock
-- that ARGV[1] already holds (a retried call) counts as taken, with its token, and its lease
-- is reset.
-- Returns {1, behind, token1, ..., tokenN} when every lock was taken, and {0, n, pttl, token1,
-- ..., tokenn} when the (n+1)-th resource is not free: the first n were taken, the rest were
-- not touched; pttl is its lock's remaining TTL in milliseconds, or -2 when its lock is free
-- but waiters are queued. behind is the largest number of microseconds by which the server
-- clock was behind a resource's last token (see next_token in grant.lua), or 0. Tokens are
-- strings (a Lua number is a double and would round them above 2^53). Every counter moves
-- before its lock is set, so a failing INCR leaves no lock for that resource.
local opts = ARGV[3]
local floor, expiry = '0', ''
if opts ~= 'P0' and opts ~= 'S0' and opts ~= '-0' then
  floor, expiry = string.sub(opts, 2, 2), string.sub(opts, 3)
end
local mine = ARGV[1] .. ':'

-- token moves the counter at fence as next_token in grant.lua does and returns the new token
-- and how far the clock is behind.
local function token(fence)
  local t
  local behind = 0
  if floor == '1' then
    local now = redis.call('TIME')
    local f = now[1] .. string.format('%06d', tonumber(now[2]))
    local last = redis.call('GET', fence) or '0'
    if string.sub(last, 1, 1) == '-' or #last < #f or (#last == #f and last < f) then
      redis.call('SET', fence, f)
      t = f
    elseif tonumber(last) - tonumber(f) > 1000000 then
      behind = tonumber(last) - tonumber(f)
    end
  end
  if not t then
    local n = redis.call('INCR', fence)
    if n < 9007199254740992 then
      t = string.format('%d', n)
    else
      t = redis.call('GET', fence)
    end
  end
  if expiry ~= '' then
    redis.call('PEXPIRE', fence, expiry)
  end
  return t, behind
end

local plain = floor == '0' and expiry == ''
local tokens = {}
local most = 0
for i = 1, #KEYS / 3 do
  local lock, fence, queue = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local t
  if redis.call('EXISTS', lock, queue) == 0 then
    if plain then
      local n = redis.call('INCR', fence)
      if n < 9007199254740992 then
        t = string.format('%d', n)
      else
        t = redis.call('GET', fence)
      end
    else
      local behind
      t, behind = token(fence)
      if behind > most then
        most = behind
      end
    end
    redis.call('SET', lock, mine .. t, 'PX', ARGV[2])
  else
    local held = redis.call('GET', lock)
    if not held or string.sub(held, 1, #mine) ~= mine then
      local reply = {0, i - 1, held and redis.call('PTTL', lock) or -2}
      for j = 1, #tokens do
        reply[j + 3] = tokens[j]
      end
      return reply
    end
    redis.call('PEXPIRE', lock, ARGV[2])
    t = string.match(held, '^%d+', #mine + 1)
  end
  tokens[i] = t
end
local reply = {1, most}
for j = 1, #tokens do
  reply[j + 2] = tokens[j]
end
return reply
