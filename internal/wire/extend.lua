-- Reset, or read, the lease of an exclusive lock while this acquisition holds it.
-- KEYS[1]: the lock key (on a Cluster its fence and queue keys follow, declared only).
-- ARGV: the lock value "<owner>:<token>" (the lock may carry '+'), the new lease in ms
-- (positive: PEXPIRE 0 deletes) or '' to read it. Returns TAKEN, {TAKEN, left ms} or NOT_HELD.
local held = redis.pcall('GET', KEYS[1])
if held ~= ARGV[1] and held ~= ARGV[1] .. '+' then
  return NOT_HELD
elseif (ARGV[2] or '') == '' then
  return {TAKEN, redis.call('PTTL', KEYS[1])}
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return TAKEN
