-- Report the remaining lease of one holder of a limited resource (see limit.lua).
-- KEYS[1]: the lock key (a hash here).
-- ARGV[1]: the lock value of this acquisition, "<owner>:<token>".
-- Returns the remaining lease in milliseconds, or -3 when this acquisition holds no slot.
-- #include limit.lua
local now = clock()
local ending = redis.pcall('HGET', KEYS[1], ARGV[1])
if type(ending) ~= 'string' or tonumber(ending) <= now then
  return -3
end
return tonumber(ending) - now
