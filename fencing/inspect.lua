-- Read what Redis holds of a resource, for Locker.Inspect: its holders, its counter and its
-- queue, in one step, writing nothing (see lib.lua for the keys and values).
-- KEYS[1], KEYS[2], KEYS[3]: the resource's lock, fence and queue keys.
-- Returns {now, kind, holders, fence, fence_pttl, queue, waiters}:
--   now:        the server time in milliseconds;
--   kind:       '' when the lock key does not exist, 'x' for an exclusive holder, or the
--               hash's kind ('shared' or a limit n);
--   holders:    {value, lease end ms, ...}: the exclusive holder's value (its mark '+'
--               removed) or each live hash holder's field, with the end of its lease;
--   fence:      the counter's value, or '' when there is none; fence_pttl its PTTL;
--   queue:      the queue's elements, head first;
--   waiters:    {id, value, ...}: each waiting Locker's waiter key, '' when it is gone.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local kind, holders = '', {}
local typ = redis.call('TYPE', KEYS[1]).ok
if typ == 'string' then
  kind = 'x'
  local v = redis.call('GET', KEYS[1])
  if string.sub(v, -1) == '+' then
    v = string.sub(v, 1, -2)
  end
  holders = {v, string.format('%d', now + redis.call('PTTL', KEYS[1]))}
elseif typ == 'hash' then
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    local f, e = all[i], all[i + 1]
    if f == 'limit' then
      kind = e
    elseif f ~= 'until' and f ~= 'q' and tonumber(e) > now then
      holders[#holders + 1] = f
      holders[#holders + 1] = e
    end
  end
end
local fence = redis.call('GET', KEYS[2]) or ''
local queue = redis.call('LRANGE', KEYS[3], 0, -1)
local base = string.sub(KEYS[1], 1, -5)
local seen, waiters = {}, {}
for _, e in ipairs(queue) do
  local id = string.match(e, '^([^.]*)%.')
  if id and not seen[id] then
    seen[id] = true
    waiters[#waiters + 1] = id
    waiters[#waiters + 1] = redis.call('GET', base .. 'w:' .. id) or ''
  end
end
return {string.format('%d', now), kind, holders, fence, redis.call('PTTL', KEYS[2]), queue, waiters}
