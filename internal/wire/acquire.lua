-- Take a resource exclusively with a fencing token in one step, or queue for it. Fast paths:
-- free and nobody waits, or another's exclusive lock; state.lua for the rest.
-- KEYS[1]: the lock key; the others are named after it (on a Cluster the fence, queue and memo
--          keys follow it, declared only).
-- ARGV: owner (random, no ':' or '.'), lease (ms), rules ('', 'f', 'e<ms>': token.lua), element
--       ('' for one attempt, else queued when busy), entry (the waiter value, '' when fresh),
--       publish ('P', 'S', '-'), memo (a name: when it exists nothing is taken). Defaults at the
--       end are left out.
-- Returns the token; {TAKEN, token, behind}; {BUSY, left ms}; {QUEUED, held, left} ({QUEUED,
-- held} behind an exclusive holder); {MISMATCH, kind}, {LAYOUT}, {MEMO, value} write nothing.
local base, owner, lease = string.sub(KEYS[1], 1, -5), ARGV[1], ARGV[2]
if (ARGV[7] or '') ~= '' then
  local memo = redis.call('GET', base .. ARGV[7])
  if memo then
    return {MEMO, memo}
  end
end
if redis.call('EXISTS', KEYS[1], base .. 'queue') == 0 then -- free, and nobody waits
  local rules, token, behind = ARGV[3] or '', nil, 0
  -- #include token.lua
  redis.call('SET', KEYS[1], owner .. ':' .. token, 'PX', lease)
  if behind > 0 then
    return {TAKEN, token, behind}
  end
  return token
end
local held = redis.pcall('GET', KEYS[1])
if type(held) == 'string' and not (string.find(held, owner, 1, true) == 1 and string.byte(held, #owner + 1) == 58) then
  if (ARGV[4] or '') == '' then
    return {BUSY, redis.call('PTTL', KEYS[1])}
  end
  local lock, q, element, entry = KEYS[1], nil, ARGV[4], ARGV[5] or ''
  -- #include join.lua
  return {QUEUED, held}
end
-- #include state.lua
return acquire(resource(KEYS[1]), 'x', owner, lease, ARGV[3] or '', ARGV[4] or '', ARGV[5] or '', ARGV[6] or 'P')
