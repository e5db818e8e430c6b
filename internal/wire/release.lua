-- Release the exclusive locks of one or several resources, each if this acquisition still
-- holds it, and hand each to its queue's next waiters in the same step (grant.lua, state.lua).
-- KEYS: the lock keys, n of them (on a Cluster of one slot; their fence and queue keys and one
--       resource's memo key follow, declared only).
-- ARGV: the lock value of each, "<owner>:<token>" ("<owner>:": whatever token the owner holds);
--       keep ('1': a record lives RECORD_TTL, not the lease's TTL; '0'); publish ('P', 'S',
--       '-'); self (the caller's Locker id if it has waiters here, whose grants come back in the
--       reply; ''); one resource's memo (memo.lua). Defaults at the end are left out.
-- Returns RELEASED, {GRANTED, element, token, ...}, NOT_HELD or LAYOUT, for each resource. A
-- call sent again after a lost reply finds the record "<base>r:<value>" (the lock renamed).
local n, got = 1, nil
while n < #KEYS and string.sub(KEYS[n + 1], -5) == ':lock' do n = n + 1 end
local keep = ARGV[n + 1] == '1'
if n == 1 then
  got = redis.pcall('GET', KEYS[1])
end
if n == 1 and (got == ARGV[1] or got == ARGV[1] .. '+') then -- held: most calls
  local lock, base, value, m, record = KEYS[1], string.sub(KEYS[1], 1, -5), ARGV[1], 5, nil
  -- #include retire.lua
  if got == ARGV[1] then -- nobody waits
    return RELEASED
  end
  -- #include grant.lua
  local r = {lock = lock, fence = base .. 'fence', queue = base .. 'queue', base = base}
  return granted(record, true, true, select(2, grant(r, {shape = 'none'}, ARGV[3] or 'P', ARGV[4] or '')))
end
-- #include state.lua
local out, publish, self = {}, ARGV[n + 2] or 'P', ARGV[n + 3] or ''
for i = 1, n do
  out[i] = release(resource(KEYS[i]), ARGV[i], keep, publish, self, n == 1 and 5)
end
return n == 1 and out[1] or out
