-- Release several locks of one acquisition in one step, each only when this acquisition holds
-- it and nobody is queued behind it; the others are left to release.lua, one by one.
-- KEYS[i]: the lock key of the i-th resource (see grant.lua). On a Cluster all share one slot.
-- ARGV[i]: the lock value of the i-th, "<owner>:<token>".
-- Returns one flag per resource: 4 when it deleted the lock (the flags of every script, see
-- scripts.go), 0 when it left the lock as it was: it is marked '+' (waiters may be queued, and
-- release.lua hands it on), or ARGV[i] does not hold it (release.lua tells not held from a
-- retried call by the release record).
-- As release.lua does, it keeps a release record <tag>:r:<owner>:<token> ("1", PX 10000) for
-- every lock it deleted, so that a retried call, finding the lock gone, answers as the first.
local out = {}
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i] then
    redis.call('DEL', KEYS[i])
    redis.call('SET', string.sub(KEYS[i], 1, -5) .. 'r:' .. ARGV[i], '1', 'PX', 10000)
    out[i] = 4
  else
    out[i] = 0
  end
end
return out
