-- Reset, or read, the lease of an exclusive lock while this acquisition holds it.
-- KEYS[1]: the lock key (on a Cluster its fence and queue keys follow, declared only).
-- ARGV[1]: the lock value "<owner>:<token>", which may carry the mark '+' (waiters queued);
-- ARGV[2]: the new lease in ms (positive: PEXPIRE 0 would delete the key), or '' to read it.
-- Returns TAKEN when extended, {TAKEN, left ms} when read, NOT_HELD when this acquisition no
-- longer holds the resource (another owner, nobody or a hash holds it).
local held = redis.pcall('GET', KEYS[1])
if held ~= ARGV[1] and held ~= ARGV[1] .. '+' then
  return NOT_HELD
elseif (ARGV[2] or '') == '' then
  return {TAKEN, redis.call('PTTL', KEYS[1])}
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return TAKEN
