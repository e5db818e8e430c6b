local TAKEN, NOT_HELD = 1, 5
-- Reset the lease of one holder of a resource if this acquisition still holds it (see
-- doc.go for the lock's values).
-- KEYS[1]: the resource's lock key; on a Cluster its fence and queue keys follow, declared
--          only (see wire.Declare).
-- ARGV[1]: value: the lock value of this acquisition, "<owner>:<token>".
-- ARGV[2]: lease: the new lease in milliseconds (a positive integer; never 0, since PEXPIRE 0
--          would delete the key).
-- ARGV[3]: kind: 'x' (exclusive, the default), 's' or 'l<n>'.
-- Returns TAKEN when extended (still held), NOT_HELD when this acquisition no longer holds the
-- resource: another owner, nobody or another kind holds it, or its lease has ended. An
-- exclusive lock's value may carry the mark '+' (waiters queued).
if (ARGV[3] or 'x') == 'x' then
  local held = redis.pcall('GET', KEYS[1]) -- a hash there is not this acquisition's
  if held == ARGV[1] or held == ARGV[1] .. '+' then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return TAKEN
  end
  return NOT_HELD
end
local owner, token = string.match(ARGV[1], '^([^:]*):(%d+)$')
local h = owner and redis.pcall('HMGET', KEYS[1], owner, 'e', 'x', 't')
if not h or h.err or not h[1] or string.match(h[1], ':(%d+)$') ~= token then
  return NOT_HELD
end
-- The time: the hash's expiry t less its TTL.
local t = tonumber(h[4])
local left = redis.call('PTTL', KEYS[1])
local now = t - left
if left < 0 or tonumber(string.match(h[1], '^%d+')) <= now then
  return NOT_HELD
end
local ending = now + tonumber(ARGV[2])
local d = string.format('%d', ending)
local w = {owner, d .. ':' .. token}
if ending < tonumber(h[2]) then
  w[#w + 1], w[#w + 2] = 'e', d
end
if ending > tonumber(h[3]) then
  w[#w + 1], w[#w + 2] = 'x', d
end
local moved = ending > t
if moved then
  -- Past the key's expiry: move it on, with room for as long again.
  t = 2 * ending - now
  w[#w + 1], w[#w + 2] = 't', string.format('%d', t)
end
redis.call('HSET', KEYS[1], unpack(w))
if moved then
  redis.call('PEXPIRE', KEYS[1], string.format('%d', t - now))
end
return TAKEN
