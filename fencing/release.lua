-- Release one or several resources of one acquisition, each if the acquisition still holds it,
-- and hand each to the next waiters of its queue in the same step (see lib.lua).
-- KEYS: three per resource, the i-th resource's lock, fence and queue keys at 3i-2, 3i-1 and
--       3i; n resources. On a Cluster they all share one slot.
-- KEYS[4]: with one resource, optionally, a guard key of it (internal/seam): with ARGV[5..7].
-- ARGV[1..n]: value: the lock value of the i-th resource's holder, "<owner>:<token>"; or
--          "<owner>:" to release whatever token that owner holds (after an acquire whose
--          reply was lost).
-- ARGV[n+1]: publish: 'P' (the default), 'S' or '-' (see acquire.lua).
-- ARGV[n+2]: kind: 'x' (exclusive, the default), 'shared' or a limit n > 1: the shape the
--          holder expects (only the exclusive one has a fast path; the lock's shape decides).
-- ARGV[n+3]: self: the releasing Locker's id when it has waiters queued for these resources
--          (grants to them come back in the reply, unannounced), or '' (the default).
-- ARGV[5], ARGV[6], ARGV[7]: with KEYS[4]: commit, a value the release writes to KEYS[4] with
--          an expiry of ARGV[6] milliseconds when ARGV[1] holds the resource ('' for none),
--          and counter, an expiry in milliseconds the release gives the fence counter unless
--          it has one ('0' for none), also only when ARGV[1] holds the resource.
-- Trailing arguments may be left out when they have their defaults.
-- Returns, for one resource, 5 when ARGV[1] does not hold it; 4 when it was released and
-- nothing was granted to the Locker self; {2, element, token, ...} when it was also granted to
-- the waiters of those queue elements of self, with those tokens (the flags of every script,
-- see scripts.go). For several resources, an array of those replies, in KEYS order.
-- The release record "<prefix><tag>:r:<value>" (never for "<owner>:") keeps each reply for a
-- retried call: go-redis retries after a lost reply, and the retry, finding the lock gone or
-- handed on, returns what the first run did ('1' for 4, '2:<element>:<token>...' for a grant
-- to self) instead of 5.
local n = math.floor(#KEYS / 3)
-- guarded: one resource and its guard key (KEYS[4] is another resource's lock otherwise).
local guarded = #KEYS == 4
-- commit writes what the caller commits with its release (see KEYS[4]).
local function commit()
  if ARGV[5] ~= '' then
    redis.call('SET', KEYS[4], ARGV[5], 'PX', ARGV[6])
  end
  if ARGV[7] ~= '0' then
    redis.call('PEXPIRE', KEYS[2], ARGV[7], 'NX')
  end
end
-- The exclusive fast path, before lib.lua's functions are created: a holder that nobody
-- waits behind (no mark '+') deletes its lock. seen keeps what the GET read for the rest.
local seen
if n == 1 and (ARGV[3] or 'x') == 'x' then
  seen = redis.pcall('GET', KEYS[1])
  if seen == ARGV[1] then
    if guarded then
      commit()
    end
    redis.call('DEL', KEYS[1])
    redis.call('SET', string.sub(KEYS[1], 1, -5) .. 'r:' .. ARGV[1], '1', 'PX', RECORD_TTL)
    return 4
  end
end
-- #include lib.lua
local publish, kind, self = ARGV[n + 1] or 'P', ARGV[n + 2] or 'x', ARGV[n + 3] or ''

-- release releases value on r and returns its reply.
local function release(r, value)
  local exact = string.sub(value, -1) ~= ':'
  local record = r.base .. 'r:' .. value
  local h = holders(r, kind, seen)
  local held
  if h and h.kind == 'x' then
    local v = h.value
    if v == value or v == value .. '+' or (not exact and string.sub(v, 1, #value) == value) then
      held = v
    end
  elseif h then
    for _, f in ipairs(h.fields) do
      if h.ends[f] and (f == value or (not exact and string.sub(f, 1, #value) == value)) then
        held = f
        break
      end
    end
  end
  if not held then
    settle(r, h)
    local first = exact and redis.call('GET', record)
    if not first then
      return 5
    elseif first == '1' then
      return 4
    end
    local reply = {2}
    for e, t in string.gmatch(first, ':([^:]+):(%d+)') do
      reply[#reply + 1] = e
      reply[#reply + 1] = t
    end
    return reply
  end
  if guarded then
    commit()
  end
  if h.kind == 'x' then
    if string.sub(held, -1) ~= '+' then
      -- Unmarked: nobody queued behind this holder.
      redis.call('DEL', r.lock)
      if exact then
        redis.call('SET', record, '1', 'PX', RECORD_TTL)
      end
      return 4
    end
    h.gone = true
  else
    drop(r, h, held)
  end
  local mine
  h, mine = fill(r, h, publish, self)
  settle(r, h)
  local reply, saved = 4, '1'
  if #mine > 0 then
    reply, saved = {2}, '2'
    for i = 1, #mine, 2 do
      reply[#reply + 1], reply[#reply + 2] = mine[i], mine[i + 1]
      saved = saved .. ':' .. mine[i] .. ':' .. mine[i + 1]
    end
  end
  if exact then
    redis.call('SET', record, saved, 'PX', RECORD_TTL)
  end
  return reply
end

if n == 1 then
  return release(resource(1), ARGV[1])
end
local out = {}
for i = 1, n do
  out[i] = release(resource(i), ARGV[i])
end
return out
