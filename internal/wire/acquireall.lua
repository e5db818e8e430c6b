-- Take the exclusive locks of several resources in one step and issue a fencing token for
-- each, as far as they are free, in the order given (the canonical order, see lockset.go; see
-- doc.go for the keys and values).
-- KEYS: the lock key of each resource; on a Cluster they share one slot, and each resource's
--       fence and queue keys follow them, declared only (see wire.Declare).
-- ARGV[1]: owner: the set's owner value, random and unique per call, without ':' or '.'; each
--          lock's value is "<owner>:<token>".
-- ARGV[2]: lease: the lease in milliseconds (a positive integer).
-- ARGV[3]: rules: '' (the default), 'f' or 'e<ms>', as in acquire.lua.
-- A resource is free when nobody holds it (or only holders whose lease ended) and nobody is
-- queued for it: a set never takes a lock ahead of the waiters of its queue (the caller then
-- waits in that queue). A lock that ARGV[1] already holds (a call sent again) counts as
-- taken, with its token, and its lease is reset.
-- Returns {TAKEN, behind, token1, ..., tokenN} when every lock was taken; {BUSY, k, left,
-- token1, ..., tokenk} when the (k+1)-th resource is not free: the first k were taken, the
-- rest were not touched; left is as lease_left says for its holders, or -2 when it is free but
-- waiters are queued; {MISMATCH, k, kind, token1, ..., tokenk} instead when its live holders
-- hold it with a limit (kind), which an exclusive lock never joins; {LAYOUT, k, '', ...} for a
-- hash of the earlier layout. behind is the largest number of microseconds by which the server
-- clock was behind a resource's last token (see next_token), or 0. Every counter moves before
-- its lock is set, so a failing INCR leaves no lock for that resource.
-- #include state.lua
local mine = ARGV[1] .. ':'
local rules = ARGV[3] or ''
local tokens = {}
local most = 0
local function stop(reply)
  for j = 1, #tokens do
    reply[j + 3] = tokens[j]
  end
  return reply
end
local n = #KEYS
while string.sub(KEYS[n], -5) ~= ':lock' do -- on a Cluster, the other keys follow (wire.Declare)
  n = n - 1
end
for i = 1, n do
  local r = resource(KEYS[i])
  local t, s
  if redis.call('EXISTS', r.lock, r.queue) ~= 0 then
    s = state(r)
  end
  if s and s.shape == 'old' then
    return stop({LAYOUT, i - 1, ''})
  elseif s and s.shape == 'x' and string.sub(s.value, 1, #mine) == mine then
    redis.call('PEXPIRE', r.lock, ARGV[2]) -- a call sent again: it holds the lock already
    t = string.match(s.value, '^%d+', #mine + 1)
  else
    local now = s and clock(r, s)
    if s then
      sweep(r, s, now)
    end
    if s and not (free(s) and redis.call('EXISTS', r.queue) == 0) then
      if mismatch(s, 'x') then
        return stop({MISMATCH, i - 1, s.kind})
      end
      return stop({BUSY, i - 1, free(s) and -2 or lease_left(r, s, now)})
    end
    local base, token, behind = r.base, nil, 0
    -- #include token.lua
    most, t = math.max(most, behind), token
    redis.call('SET', r.lock, mine .. t, 'PX', ARGV[2])
  end
  tokens[i] = t
end
local reply = {TAKEN, most}
for j = 1, #tokens do
  reply[j + 2] = tokens[j]
end
return reply
