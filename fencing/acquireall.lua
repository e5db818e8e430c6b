-- Take the exclusive locks of several resources in one step and issue a fencing token for each,
-- as far as they are free, in the order given (the canonical order, see lockset.go; see
-- lib.lua for the keys).
-- KEYS: three per resource, the i-th resource's lock, fence and queue keys at 3i-2, 3i-1 and
--       3i. On a Cluster they all share one slot.
-- ARGV[1]: owner: the set's owner value, random and unique per call, without ':' or '.'; each
--          lock's value is "<owner>:<token>".
-- ARGV[2]: lease: the lease length in milliseconds (a positive integer).
-- ARGV[3]: floor: '1' or '0' (the default), as in acquire.lua.
-- ARGV[4]: expiry: the counter's expiry in milliseconds, or '0' (the default).
-- A resource is free when its lock does not exist and nobody is queued for it: a set never
-- takes a lock ahead of the waiters of its queue (the caller then waits in that queue). A lock
-- that ARGV[1] already holds (a retried call) counts as taken, with its token, and its lease
-- is reset.
-- Returns {1, behind, token1, ..., tokenN} when every lock was taken, and {0, n, left, token1,
-- ..., tokenn} when the (n+1)-th resource is not free: the first n were taken, the rest were
-- not touched; left is as lease_left says for its holders, or -2 when its lock is free but
-- waiters are queued; {6, n, kind, token1, ..., tokenn} instead when the (n+1)-th resource's
-- live holders hold it with a limit (kind), which an exclusive lock never joins. behind is the largest number of microseconds by which the server clock
-- was behind a resource's last token (see next_token), or 0. Every counter moves before its
-- lock is set, so a failing INCR leaves no lock for that resource.
-- #include lib.lua
local mine = ARGV[1] .. ':'
local floor, expiry = ARGV[3] or '0', ARGV[4] or '0'
local tokens = {}
local most = 0
for i = 1, #KEYS / 3 do
  local r = resource(i)
  local t
  if redis.call('EXISTS', r.lock, r.queue) == 0 then
    local behind
    t, behind = next_token(r.fence, floor, expiry)
    most = math.max(most, behind)
    redis.call('SET', r.lock, mine .. t, 'PX', ARGV[2])
  else
    local h = holders(r, 'x')
    if h and h.kind == 'x' and string.sub(h.value, 1, #mine) == mine then
      redis.call('PEXPIRE', r.lock, ARGV[2])
      t = string.match(h.value, '^%d+', #mine + 1)
    elseif free(h) and redis.call('EXISTS', r.queue) == 0 then
      -- Holders whose leases all ended, nobody queued: the resource is free.
      if h then
        redis.call('DEL', r.lock)
      end
      local behind
      t, behind = next_token(r.fence, floor, expiry)
      most = math.max(most, behind)
      redis.call('SET', r.lock, mine .. t, 'PX', ARGV[2])
    else
      settle(r, h)
      local reply = {0, i - 1, free(h) and -2 or lease_left(r, h)}
      if mismatch(h, 'x') and h.kind ~= 'x' then
        reply = {6, i - 1, h.kind}
      end
      for j = 1, #tokens do
        reply[j + 3] = tokens[j]
      end
      return reply
    end
  end
  tokens[i] = t
end
local reply = {1, most}
for j = 1, #tokens do
  reply[j + 2] = tokens[j]
end
return reply
