-- A new hash of shared or limited holders (grant.lua: its state; hold.lua: a holder); the time.

-- open makes lock a hash of kind, marked q, with one holder, field f with token whose
-- lease ends at ending, and returns its state; the lock was free.
local function open(lock, kind, q, f, token, ending, now)
  local d = string.format('%d', ending)
  local t = 2 * ending - now
  redis.call('HSET', lock, 'k', kind, 'q', q, 'e', d, 'x', d, 't', string.format('%d', t), f, d .. ':' .. token)
  redis.call('PEXPIRE', lock, string.format('%d', t - now))
  return {shape = 'hash', kind = kind, q = q, e = ending, x = ending, t = t, count = 1}
end

-- clock returns the server time in milliseconds: for a hash, the key's expiry t less its TTL
-- (one integer reply, where TIME costs an array and two numbers parsed).
local function clock(lock, s)
  if s and s.shape == 'hash' then
    local left = redis.call('PTTL', lock)
    if left >= 0 then
      return s.t - left
    end
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
