-- Read what Redis holds of a resource, for Locker.Inspect, writing nothing: a hash of the
-- earlier layout (fields 'limit', "<owner>:<token>" = lease end) too. KEYS[1]: the lock key
-- (on a Cluster its fence and queue keys follow, declared only). Returns {now (ms), kind (''
-- free, 'x', 's', 'l<n>', 'old:s', 'old:l<n>'), holders {owner, token, lease end ms, ...} (live
-- ones), fence ('' none), fence PTTL, queue (head first), waiters {id, waiter value or '', ...}}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local kind, holders = '', {}
local typ = redis.call('TYPE', KEYS[1]).ok
if typ == 'string' then
  kind = 'x'
  local owner, token = string.match(redis.call('GET', KEYS[1]), '^(.*):(%d+)%+?$')
  if owner then
    holders = {owner, token, string.format('%d', now + redis.call('PTTL', KEYS[1]))}
  end
elseif typ == 'hash' then
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    local f, v = all[i], all[i + 1]
    if f == 'k' then
      kind = v
    elseif f == 'limit' then
      kind = 'old:' .. (v == 'shared' and 's' or 'l' .. v)
    elseif #f > 1 and f ~= 'until' then
      local ending, token = string.match(v, '^(%d+):(%d+)$')
      local owner = f
      if not ending then -- the earlier layout: "<owner>:<token>" holding the lease's end
        owner, token = string.match(f, '^(.*):(%d+)$')
        ending = string.match(v, '^%d+$')
      end
      if owner and ending and tonumber(ending) > now then
        holders[#holders + 1], holders[#holders + 2], holders[#holders + 3] = owner, token, ending
      end
    end
  end
end
local base = string.sub(KEYS[1], 1, -5)
local fence = redis.call('GET', base .. 'fence') or ''
local queue = redis.call('LRANGE', base .. 'queue', 0, -1)
local seen, waiters = {}, {}
for _, e in ipairs(queue) do
  local id = string.match(e, '^([^.]*)%.')
  if id and not seen[id] then
    seen[id] = true
    waiters[#waiters + 1] = id
    waiters[#waiters + 1] = redis.call('GET', base .. 'w:' .. id) or ''
  end
end
return {string.format('%d', now), kind, holders, fence, redis.call('PTTL', base .. 'fence'), queue, waiters}
