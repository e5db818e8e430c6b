-- Take a place among the shared holders of a resource (kind 's') or one of its n slots ('l<n>')
-- with a fencing token in one step, or queue for it. Fast path: holders of the same kind,
-- nobody waiting, room left; state.lua for the rest. KEYS[1]: the lock key (acquire.lua).
-- ARGV: owner, lease, kind, then rules, element, entry, publish, memo as in acquire.lua.
-- Returns as acquire.lua does.
local base, owner, lease, kind = string.sub(KEYS[1], 1, -5), ARGV[1], ARGV[2], ARGV[3]
if (ARGV[8] or '') ~= '' then
  local memo = redis.call('GET', base .. ARGV[8])
  if memo then
    return {MEMO, memo}
  end
end
local h = redis.pcall('HMGET', KEYS[1], 'k', 'q', 'e', 'x', 't', owner)
if not h.err and h[1] == kind and h[2] == '0' and not h[6] and
    (kind == 's' or redis.call('HLEN', KEYS[1]) - META < tonumber(string.sub(kind, 2))) then
  local left = redis.call('PTTL', KEYS[1])
  if left >= 0 then
    local rules, token, behind = ARGV[4] or '', nil, 0
    -- #include token.lua
    local s = {e = tonumber(h[3]), x = tonumber(h[4]), t = tonumber(h[5]), count = 0}
    local now = s.t - left
    local lock, f, ending, again = KEYS[1], owner, now + tonumber(lease), false
    -- #include hold.lua
    if behind > 0 then
      return {TAKEN, token, behind}
    end
    return token
  end
end
-- #include state.lua
return acquire(resource(KEYS[1]), kind, owner, lease, ARGV[4] or '', ARGV[5] or '', ARGV[6] or '', ARGV[7] or 'P')
