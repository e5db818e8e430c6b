-- Take a resource exclusively and issue its fencing token in one step, or queue for it (see
-- doc.go for the keys and values, state.lua for the cases other than the two fast ones).
-- KEYS[1]: the lock key; the other keys are named after it (on a Cluster the fence and queue
--          keys, and the memo's, follow it, declared only).
-- ARGV: owner (random per acquisition, without ':' or '.'), lease (ms), rules ('', 'f' or
--       'e<ms>', see token.lua), element ('' for one attempt, else the waiter's queue element,
--       queued when busy), entry (the Locker's waiter value, '' when fresh), publish ('P', 'S'
--       or '-'), memo ('' or a memo's name: when it exists nothing is taken). Trailing
--       arguments with their defaults ('', '', '', 'P', '') are left out.
-- Returns the token; {TAKEN, token, behind} when the server clock is behind the last token;
-- {BUSY, left ms}; {QUEUED, held, left}, or {QUEUED, held} behind an exclusive holder (held: its
-- lock value); and, writing nothing, {MISMATCH, kind}, {LAYOUT} or {MEMO, value}.
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
if type(held) == 'string' and string.sub(held, 1, #owner + 1) ~= owner .. ':' then -- another's
  if (ARGV[4] or '') == '' then
    return {BUSY, redis.call('PTTL', KEYS[1])}
  end
  local lock, q, element, entry = KEYS[1], nil, ARGV[4], ARGV[5] or ''
  -- #include join.lua
  return {QUEUED, held}
end
-- #include state.lua
return acquire(resource(KEYS[1]), 'x', owner, lease, ARGV[3] or '', ARGV[4] or '', ARGV[5] or '', ARGV[6] or 'P')
