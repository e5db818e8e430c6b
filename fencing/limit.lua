-- Functions shared by the scripts of a limited resource, one that admits up to n holders at
-- once (WithLimit(n), n > 1): the text of this file replaces the line "-- #include limit.lua"
-- of the limit_*.lua scripts. They expect KEYS[1], the lock key "<prefix><tag>:lock", to be a
-- hash for such a resource: the field 'limit' holds n, and one field "<owner>:<token>" per
-- holder holds the end of its lease in server milliseconds (a string, read with TIME). The key
-- expires with the latest lease, and is deleted once no lease is left. A string there is the
-- lock of a resource taken with limit 1 (see grant.lua). The fence, queue, waiter keys and
-- channels are those of grant.lua, shared by both kinds.

-- clock returns the server time in milliseconds.
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- holders reads the hash at now and deletes the holders whose lease ended. It returns nil
-- when KEYS[1] is a string (a lock of limit 1), and otherwise a table: limit (the limit
-- recorded, a string, or nil), live (the number of live holders), fields (theirs, in the
-- hash's order), ends (each one's lease end, by field) and changed (whether the hash was
-- written, as hold and drop also set it).
local function holders(now)
  local all = redis.pcall('HGETALL', KEYS[1])
  if all.err then
    return nil
  end
  local h = {live = 0, fields = {}, ends = {}}
  local gone = {}
  for i = 1, #all, 2 do
    local f, v = all[i], all[i + 1]
    if f == 'limit' then
      h.limit = v
    elseif tonumber(v) <= now then
      gone[#gone + 1] = f
    else
      h.live = h.live + 1
      h.fields[#h.fields + 1] = f
      h.ends[f] = tonumber(v)
    end
  end
  if #gone > 0 then
    redis.call('HDEL', KEYS[1], unpack(gone))
    h.changed = true
  end
  return h
end

-- hold gives (or renews) the holder field f a lease that ends at the server millisecond
-- ending.
local function hold(h, f, ending)
  if not h.ends[f] then
    h.live = h.live + 1
    h.fields[#h.fields + 1] = f
  end
  h.ends[f] = ending
  h.changed = true
  redis.call('HSET', KEYS[1], f, string.format('%d', ending))
end

-- drop removes the holder field f.
local function drop(h, f)
  redis.call('HDEL', KEYS[1], f)
  h.ends[f] = nil
  h.live = h.live - 1
  h.changed = true
end

-- bounds returns the earliest and the latest lease end of h's live holders.
local function bounds(h)
  local first, last
  for _, e in pairs(h.ends) do
    if not first or e < first then
      first = e
    end
    if not last or e > last then
      last = e
    end
  end
  return first, last
end

-- settle records limit with the live holders and sets the key's expiry at the latest lease,
-- or deletes the key when no holder is left; it writes nothing when nothing changed.
local function settle(h, now, limit)
  if not h.changed and (h.live == 0 or h.limit == limit) then
    return
  end
  if h.live <= 0 then
    redis.call('DEL', KEYS[1])
    return
  end
  if h.limit ~= limit then
    redis.call('HSET', KEYS[1], 'limit', limit)
    h.limit = limit
  end
  local _, last = bounds(h)
  redis.call('PEXPIRE', KEYS[1], string.format('%d', last - now))
end

-- fill grants free slots, up to the limit n, to the queue's waiters in order (see
-- grant_next; self as there), and returns the grants made, each {element, token}. wrote says
-- the script wrote already: else EXISTS comes before LPOP, which counts as a write even on
-- a missing key (under maxmemory, Redis refuses a script's INCR only before its first write).
local function fill(h, now, n, opts, self, wrote)
  local made = {}
  if h.live >= n or (not wrote and redis.call('EXISTS', KEYS[3]) == 0) then
    return made
  end
  local give = function(value, lease)
    hold(h, value, now + tonumber(lease))
  end
  while h.live < n do
    local g = grant_next(redis.call('LPOP', KEYS[3]), opts, self, give)
    if not g then
      break
    end
    made[#made + 1] = g
    if locker_of(g[1]) == self then
      self = '' -- one grant to the caller comes back in its reply; the others are announced
    end
  end
  return made
end
