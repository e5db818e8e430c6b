-- Free one holder of a shared or limited resource (fencing.Shared, fencing.WithLimit) if it
-- still holds it.
-- KEYS[1]: the lock key, a hash: 'limit' ('shared' or the limit n), 'until' (when the key
-- expires, which the library's scripts rely on: it is left as it is), 'q' (the queue mark)
-- and one field "<owner>:<token>" per holder holding the end of its lease (the server's unix
-- ms).
-- ARGV[1]: the holder's field, read before asking.
-- Returns 1 when the holder was freed, 0 when it no longer holds the resource (released, or
-- the key is gone or is an exclusive lock now). The key is deleted when no live holder is
-- left, and otherwise keeps its expiry. Nothing is published: waiters take the resource
-- through their own polling.
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' or redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('HGETALL', KEYS[1])
local last = 0
for i = 1, #all, 2 do
  local f, ending = all[i], tonumber(all[i + 1])
  if f ~= 'limit' and f ~= 'until' and f ~= 'q' and ending and ending > last then
    last = ending
  end
end
if last <= now then
  redis.call('DEL', KEYS[1])
end
return 1
