-- Reset a lock's TTL if this acquisition still holds it.
-- KEYS[1]: the lock key.
-- ARGV[1]: the lock value of this acquisition, "<owner>:<token>".
-- ARGV[2]: the new lease length in milliseconds (a positive integer; never 0, since
--          PEXPIRE 0 would delete the key).
-- Returns 1 when extended (still held), 5 when another owner (or nobody) holds the lock (the
-- flags of every script, see scripts.go). The value may
-- carry the mark '+' (waiters queued, see grant.lua).
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] or held == ARGV[1] .. '+' then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 5
