-- Keep a Locker's waiters in a limited resource's queue and find out whether a slot was
-- granted to one of them, for a waiter that heard nothing for a while (a lost announcement,
-- a holder that died); as poll.lua, for a resource of limit.lua.
-- KEYS[1], KEYS[2], KEYS[3]: the lock (a hash here), fence and queue keys.
-- ARGV[1]: the Locker's id; ARGV[2]: its waiter value "<lease ms>:<floor>:<since>".
-- ARGV[3]: opts (see grant.lua). ARGV[4]: the limit n the Locker asks for.
-- ARGV[5] and on: the queue elements of the Locker's waiters that have not received a grant,
--          longest-waiting first.
-- Free slots (holders released or their leases ran out) go to the queue's first live
-- waiters; grants are announced, also to this Locker. Returns {2, element, token, now} when
-- a waiter of ARGV[5..] holds a slot (now is 1 when this call granted it, 0 when it was
-- granted before), and otherwise {0, '', pttl}, the time until the earliest lease ends (the
-- waiter checks again then), or {0, ''} when no slot is held. Elements of ARGV[5..] missing
-- from the queue (dropped while the Locker's key had lapsed) are added at the tail, except
-- those that hold a slot, before the free slots are granted.
-- #include grant.lua
-- #include limit.lua
local now = clock()
local h = holders(now)
local granted
local mine = {}
for i = 5, #ARGV do
  mine[ARGV[i]] = true
end
if h then
  for _, f in ipairs(h.fields) do
    local owner, token = string.match(f, '^(.*):(%d+)$')
    if owner and mine[owner] then
      granted = granted or {2, owner, token, 0}
      mine[owner] = nil
    end
  end
end
if #ARGV >= 5 then
  if #ARGV == 5 then
    if mine[ARGV[5]] and redis.call('LPOS', KEYS[3], ARGV[5]) then
      mine[ARGV[5]] = nil
    end
  else
    for _, e in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
      mine[e] = nil
    end
  end
  for i = 5, #ARGV do
    if mine[ARGV[i]] then
      redis.call('RPUSH', KEYS[3], ARGV[i])
    end
  end
  redis.call('PEXPIRE', KEYS[3], ENTRY_TTL)
  redis.call('SET', waiter_key(ARGV[1]), ARGV[2], 'PX', ENTRY_TTL)
end
if not h then
  return {0, '', redis.call('PTTL', KEYS[1])}
end
local limit = ARGV[4]
if h.live > 0 then
  limit = h.limit or limit
end
local wanted = {}
for i = 5, #ARGV do
  wanted[ARGV[i]] = true
end
for _, g in ipairs(fill(h, now, tonumber(limit), ARGV[3], '', #ARGV >= 5)) do
  if not granted and wanted[g[1]] then
    granted = {2, g[1], g[2], 1}
  end
end
settle(h, now, limit)
if granted then
  return granted
end
if h.live > 0 then
  local first = bounds(h)
  return {0, '', first - now}
end
return {0, ''}
