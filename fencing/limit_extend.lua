-- Reset the lease of one holder of a limited resource if it still holds its slot (see
-- limit.lua).
-- KEYS[1]: the lock key (a hash here).
-- ARGV[1]: the lock value of this acquisition, "<owner>:<token>".
-- ARGV[2]: the new lease length in milliseconds (a positive integer).
-- Returns 1 when extended, 5 when this acquisition holds no slot (its lease ended, it was
-- released, or the key is not a limited resource's) (the flags of every script, see
-- scripts.go).
-- #include limit.lua
local now = clock()
local ending = redis.pcall('HGET', KEYS[1], ARGV[1])
if type(ending) ~= 'string' or tonumber(ending) <= now then
  return 5
end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', now + tonumber(ARGV[2])))
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
