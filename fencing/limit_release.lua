-- Free one slot of a limited resource if this acquisition still holds it, and hand the free
-- slots to the queue's next waiters in the same step (see limit.lua and grant.lua).
-- KEYS[1], KEYS[2], KEYS[3]: the lock (a hash here), fence and queue keys.
-- ARGV[1]: the lock value of this acquisition, "<owner>:<token>"; or "<owner>:" to release
--          whatever token that owner holds (after an acquire whose reply was lost).
-- ARGV[2]: opts (see grant.lua).
-- ARGV[3]: optional: the releasing Locker's id, when it has waiters queued for the resource:
--          one grant to them comes back in the reply, unannounced (see grant_next).
-- Returns 5 when ARGV[1] holds no slot; 4 when it freed the slot and granted none to the
-- caller's waiters; {2, element, token} when it also granted a slot to the caller's waiter
-- of that element (other grants are announced); 6 when an exclusive lock (limit 1) holds the
-- resource. The release record <tag>:r:<owner>:<token> keeps the reply for a retried call,
-- as in release.lua.
local record = string.sub(KEYS[1], 1, -5) .. 'r:' .. ARGV[1]
local exact = string.sub(ARGV[1], -1) ~= ':'
-- #include grant.lua
-- #include limit.lua
local now = clock()
local h = holders(now)
if not h then
  return 6
end
local field
if exact then
  if h.ends[ARGV[1]] then
    field = ARGV[1]
  end
else
  for _, f in ipairs(h.fields) do
    if h.ends[f] and string.sub(f, 1, #ARGV[1]) == ARGV[1] then
      field = f
      break
    end
  end
end
if not field then
  local first = exact and redis.call('GET', record)
  if not first then
    return 5
  elseif first == '1' then
    return 4
  end
  local element, token = string.match(first, '^2:(.*):(%d+)$')
  return {2, element, token}
end
drop(h, field)
local limit = h.limit or '1'
local self = ARGV[3] or ''
local reply, saved = 4, '1'
for _, g in ipairs(fill(h, now, tonumber(limit), ARGV[2], self, true)) do
  if self ~= '' and locker_of(g[1]) == self then
    reply, saved = {2, g[1], g[2]}, '2:' .. g[1] .. ':' .. g[2]
  end
end
settle(h, now, limit)
if exact then
  redis.call('SET', record, saved, 'PX', 10000)
end
return reply
