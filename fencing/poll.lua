-- Keep a Locker's waiters in a resource's queue and find out whether the resource was granted
-- to some of them, for a waiter that heard nothing for a while (a lost announcement, a holder
-- that died); see lib.lua.
-- KEYS[1], KEYS[2], KEYS[3]: the resource's lock, fence and queue keys.
-- ARGV[1]: id: the Locker's id.
-- ARGV[2]: entry: its waiter value "<lease ms>:<floor>:<since>".
-- ARGV[3]: publish: 'P', 'S' or '-' (see acquire.lua).
-- ARGV[4] and on: the queue elements of the Locker's waiters that have not received a grant,
--          longest-waiting first.
-- Elements of ARGV[4..] missing from the queue (dropped while the Locker's key had lapsed) are
-- added at the tail, except those that hold the resource; then whatever fits is granted to the
-- queue's head waiters (holders whose lease ran out are gone). Returns {2, element, token,
-- now, ...}, one triple per grant to a waiter of this Locker (now is 1 when this call granted
-- it, 0 when it was granted before); otherwise {0, held, left}: an exclusive holder's lock
-- value (or '' for a hash) and lease_left's milliseconds (the waiter checks again then), or
-- {0, ''} when the resource is free.
-- #include lib.lua
local id, publish = ARGV[1], ARGV[3]
local r = resource(1)
local h = holders(r, 'x')
local out = {}
local mine = {}
for i = 4, #ARGV do
  mine[ARGV[i]] = true
end
-- Grants made before whose announcement was lost.
local function found(value)
  local owner, token = string.match(value, '^(.*):(%d+)%+?$')
  if owner and mine[owner] then
    out[#out + 1], out[#out + 2], out[#out + 3] = owner, token, 0
    mine[owner] = nil
  end
end
if h and h.kind == 'x' then
  found(h.value)
elseif h then
  for _, f in ipairs(h.fields) do
    found(f)
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
      redis.call('RPUSH', r.queue, ARGV[i])
      if h and h.kind == 'x' and string.sub(h.value, -1) ~= '+' then
        redis.call('APPEND', r.lock, '+') -- mark the lock (see lib.lua)
        h.value = h.value .. '+'
      elseif h and h.kind ~= 'x' then
        h.mark = true
      end
    end
  end
  redis.call('PEXPIRE', r.queue, ENTRY_TTL)
  redis.call('SET', r.base .. 'w:' .. id, ARGV[2], 'PX', ENTRY_TTL)
end
local granted
h, granted = fill(r, h, publish, id)
settle(r, h)
for i = 1, #granted, 2 do
  out[#out + 1], out[#out + 2], out[#out + 3] = granted[i], granted[i + 1], 1
end
if #out > 0 then
  table.insert(out, 1, 2)
  return out
end
if free(h) then
  return {0, ''}
end
local held = ''
if h.kind == 'x' then
  held = h.value
end
return {0, held, lease_left(r, h)}
