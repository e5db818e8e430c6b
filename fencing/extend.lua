-- Reset the lease of one holder of a resource if this acquisition still holds it (see lib.lua
-- for the lock's shapes).
-- KEYS[1]: the resource's lock key.
-- ARGV[1]: value: the lock value of this acquisition, "<owner>:<token>".
-- ARGV[2]: lease: the new lease length in milliseconds (a positive integer; never 0, since
--          PEXPIRE 0 would delete the key).
-- ARGV[3]: kind: 'x' (exclusive, the default), 'shared' or a limit n > 1.
-- Returns 1 when extended (still held), 5 when this acquisition no longer holds the resource:
-- another owner (or nobody, or another kind) holds it (the flags of every script, see
-- scripts.go). An exclusive lock's value may carry the mark '+' (waiters queued).
if (ARGV[3] or 'x') == 'x' then
  local held = redis.pcall('GET', KEYS[1]) -- a hash there is not this acquisition's
  if held == ARGV[1] or held == ARGV[1] .. '+' then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return 1
  end
  return 5
end
-- #include lib.lua
local now = clock()
local got = redis.pcall('HMGET', KEYS[1], ARGV[1], 'until')
if got.err or not got[1] or tonumber(got[1]) <= now then
  return 5
end
local ending = now + tonumber(ARGV[2])
if ending <= tonumber(got[2] or '0') then
  redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', ending))
  return 1
end
-- Past the key's expiry: move it on, with room for as long again (see lib.lua).
local expires = 2 * ending - now
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', ending), 'until', string.format('%d', expires))
redis.call('PEXPIRE', KEYS[1], string.format('%d', expires - now))
return 1
