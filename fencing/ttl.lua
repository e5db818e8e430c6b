-- Report the remaining lease of one holder of a resource if this acquisition still holds it
-- (see lib.lua for the lock's shapes).
-- KEYS[1]: the resource's lock key.
-- ARGV[1]: value: the lock value of this acquisition, "<owner>:<token>".
-- ARGV[2]: kind: 'x' (exclusive, the default), 'shared' or a limit n > 1.
-- Returns the remaining lease in milliseconds, or -3 when this acquisition no longer holds
-- the resource. An exclusive lock's value may carry the mark '+' (waiters queued).
if (ARGV[2] or 'x') == 'x' then
  local held = redis.pcall('GET', KEYS[1])
  if held == ARGV[1] or held == ARGV[1] .. '+' then
    return redis.call('PTTL', KEYS[1])
  end
  return -3
end
-- #include lib.lua
local now = clock()
local ending = redis.pcall('HGET', KEYS[1], ARGV[1])
if type(ending) ~= 'string' or tonumber(ending) <= now then
  return -3
end
return tonumber(ending) - now
