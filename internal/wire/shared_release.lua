-- Release one shared or limited holder if this acquisition still holds it, and hand the
-- resource to its queue's next waiters in the same step. Fast path: a live holder nobody waits
-- behind; state.lua for the rest. KEYS[1]: the lock key (release.lua). ARGV: the holder's
-- value ("<owner>:" too), then publish, self and the memo as in release.lua. Returns as
-- release.lua does; the record "<base>r:<value>" lives RECORD_TTL.
local owner, token = string.match(ARGV[1], '^([^:]*):(%d+)$')
local h = owner and redis.pcall('HMGET', KEYS[1], owner, 'q', 't')
if h and not h.err and h[1] and h[2] == '0' and string.match(h[1], ':(%d+)$') == token then
  local left = redis.call('PTTL', KEYS[1])
  if left >= 0 and tonumber(string.match(h[1], '^%d+')) > tonumber(h[3]) - left then
    local base, m = string.sub(KEYS[1], 1, -5), 4
    -- #include memo.lua
    redis.call('HDEL', KEYS[1], owner)
    redis.call('SET', base .. 'r:' .. ARGV[1], '1', 'PX', RECORD_TTL)
    return RELEASED
  end
end
-- #include state.lua
return release(resource(KEYS[1]), ARGV[1], false, ARGV[2] or 'P', ARGV[3] or '', 4)
