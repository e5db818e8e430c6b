-- Release the exclusive locks of one or several resources (of one slot), each if this
-- acquisition still holds it, and hand each to its queue's next waiters in the same step.
-- KEYS: their lock keys (on a Cluster their fence and queue keys and the memo's follow).
-- ARGV: each lock value ("<owner>:" too: whatever token the owner holds), keep ('1': the
--       record lives RECORD_TTL), publish, self (the caller's Locker id when it has waiters
--       here: their grants come back in the reply), one resource's memo (memo.lua).
-- Returns RELEASED, {GRANTED, element, token, ...}, NOT_HELD or LAYOUT, for each resource.
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
  local _, mine = grant(lock, base, nil, ARGV[3] or 'P', ARGV[4] or '')
  return granted(record, true, true, mine)
end
-- #include state.lua
local out, publish, self = {}, ARGV[n + 2] or 'P', ARGV[n + 3] or ''
for i = 1, n do
  out[i] = release(resource(KEYS[i]), ARGV[i], keep, publish, self, n == 1 and 5)
end
return n == 1 and out[1] or out
