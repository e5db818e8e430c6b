-- Acquire a lock and issue its fencing token in one step.
-- KEYS[1]: the lock key; its value is "<owner>:<token>".
-- KEYS[2]: the fence key: the resource's token counter. It never expires and is never deleted.
-- ARGV[1]: the owner value, random and unique per acquisition, without ':'.
-- ARGV[2]: the lease length in milliseconds (a positive integer).
-- ARGV[3]: "1" to keep tokens at or above the server clock in microseconds, "0" otherwise.
-- Returns {1, token, pttl} when acquired, also when ARGV[1] already holds the lock (a retried
-- call), and {0, pttl} when another owner holds it. The token is a string: a Lua number is a
-- double and would round it above 2^53.
-- Order matters because scripts do not roll back: the counter moves before the lock is set,
-- so a failing INCR (at the int64 maximum) leaves no lock, and a lock never lacks a token.
local held = redis.call('GET', KEYS[1])
if held then
  local mine = ARGV[1] .. ':'
  if string.sub(held, 1, #mine) == mine then
    return {1, string.sub(held, #mine + 1), redis.call('PTTL', KEYS[1])}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end

local token
if ARGV[3] == '1' then
  local now = redis.call('TIME')
  local floor = now[1] .. string.format('%06d', tonumber(now[2]))
  local last = redis.call('GET', KEYS[2]) or '0'
  if string.sub(last, 1, 1) == '-' or #last < #floor or (#last == #floor and last < floor) then
    redis.call('SET', KEYS[2], floor)
    token = floor
  end
end
if not token then
  redis.call('INCR', KEYS[2])
  token = redis.call('GET', KEYS[2])
end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. token, 'PX', ARGV[2])
return {1, token, tonumber(ARGV[2])}
