-- Keep a Locker's waiters queued for a resource and find the grants to them: for a waiter
-- that heard nothing for a while (a lost announcement, a holder whose lease ran out).
-- KEYS[1]: the lock key (on a Cluster its fence and queue keys follow, declared only).
-- ARGV: the Locker's id, its waiter value, publish ('P', 'S' or '-'), then the elements of its
-- waiters without a grant, longest-waiting first. Those missing from the queue (dropped while
-- the waiter key had lapsed) and not holding are put back at the tail; then whatever fits is
-- granted (grant.lua). Returns {GRANTED, element, token, now, ...} for this Locker's grants
-- (now: 1 when this call made it, 0 when made before); else {BUSY, held, left} (held: an
-- exclusive holder's value, else ''), {BUSY, ''} when free, or {LAYOUT}.
-- #include state.lua
local id, publish = ARGV[1], ARGV[3]
local r = resource(KEYS[1])
local s = state(r)
if s.shape == 'old' then
  return {LAYOUT}
end
local now, out, mine = s.shape == 'hash' and clock(r.lock, s), {}, {}
for i = 4, #ARGV do
  mine[ARGV[i]] = true
end
-- Grants made before whose announcement was lost: this Locker's elements among the holders.
if s.shape == 'x' then
  local owner, token = string.match(s.value, '^(.*):(%d+)%+?$')
  if owner and mine[owner] then
    out[#out + 1], out[#out + 2], out[#out + 3] = owner, token, 0
    mine[owner] = nil
  end
elseif s.shape == 'hash' and #ARGV >= 4 then
  local held = redis.call('HMGET', r.lock, unpack(ARGV, 4))
  for i = 4, #ARGV do
    local f = held[i - 3]
    if f and tonumber(string.match(f, '^%d+')) > now then
      out[#out + 1], out[#out + 2], out[#out + 3] = ARGV[i], string.match(f, ':(%d+)$'), 0
      mine[ARGV[i]] = nil
    end
  end
end
if #ARGV >= 4 then
  if #ARGV == 4 then
    if mine[ARGV[4]] and redis.call('LPOS', r.queue, ARGV[4]) then
      mine[ARGV[4]] = nil
    end
  else
    for _, e in ipairs(redis.call('LRANGE', r.queue, 0, -1)) do
      mine[e] = nil
    end
  end
  for i = 4, #ARGV do
    if mine[ARGV[i]] then
      local lock, base, held, q, element, entry = r.lock, r.base, s.shape == 'x' and s.value, s.q, ARGV[i], ''
      -- #include join.lua
      if held and string.byte(held, -1) ~= 43 then
        s.value = held .. '+'
      elseif q then
        s.q = '1'
      end
    end
  end
  redis.call('PEXPIRE', r.queue, ENTRY_TTL)
  redis.call('SET', r.base .. 'w:' .. id, ARGV[2], 'PX', ENTRY_TTL)
end
if s.shape == 'hash' then
  sweep(r, s, now)
end
local fresh
s, fresh = grant(r.lock, r.base, s, publish, id, now)
for i = 1, #(fresh or {}), 2 do
  out[#out + 1], out[#out + 2], out[#out + 3] = fresh[i], fresh[i + 1], 1
end
if #out > 0 then
  table.insert(out, 1, GRANTED)
  return out
end
if free(s) then
  return {BUSY, ''}
end
return {BUSY, s.shape == 'x' and s.value or '', lease_left(r, s, now or clock(r.lock, s))}
