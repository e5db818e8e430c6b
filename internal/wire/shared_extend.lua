-- Reset, or read, the lease of one shared or limited holder while this acquisition holds it.
-- KEYS[1]: the lock key (extend.lua). ARGV: the holder's value "<owner>:<token>", the new lease
-- in ms or '' to read it. Returns as extend.lua does; the time is the hash's t less its TTL.
local owner, token = string.match(ARGV[1], '^([^:]*):(%d+)$')
local h = owner and redis.pcall('HMGET', KEYS[1], owner, 'e', 'x', 't')
if not h or h.err or not h[1] or string.match(h[1], ':(%d+)$') ~= token then
  return NOT_HELD
end
local s = {e = tonumber(h[2]), x = tonumber(h[3]), t = tonumber(h[4])}
local left = redis.call('PTTL', KEYS[1])
local now, ending = s.t - left, tonumber(string.match(h[1], '^%d+'))
if left < 0 or ending <= now then
  return NOT_HELD
elseif (ARGV[2] or '') == '' then
  return {TAKEN, ending - now}
end
local lock, f, again = KEYS[1], owner, true
ending = now + tonumber(ARGV[2])
-- #include hold.lua
return TAKEN
