-- Report a lock's remaining TTL if this acquisition still holds it.
-- KEYS[1]: the lock key.
-- ARGV[1]: the lock value of this acquisition, "<owner>:<token>".
-- Returns the remaining TTL in milliseconds, or -3 when another owner (or nobody) holds it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
return -3
