-- Take the exclusive locks of several resources (of one slot) in one step, each with a token,
-- as far as they are free, in the order given: each as state.lua's acquire takes one.
-- KEYS: their lock keys (on a Cluster their fence and queue keys follow, declared only).
-- ARGV: owner (the set's; each value is "<owner>:<token>"), lease, rules, publish.
-- Returns {TAKEN, behind, token1, ..., tokenN}; else, the (k+1)-th not taken, {BUSY, k, left,
-- token1, ..., tokenk}, {MISMATCH, k, kind, ...} or {LAYOUT, k, '', ...}; the rest untouched.
-- #include state.lua
local n, tokens, most = #KEYS, {}, 0
while string.sub(KEYS[n], -5) ~= ':lock' do -- on a Cluster, the other keys follow (wire.Declare)
  n = n - 1
end
for i = 1, n do
  local res = acquire(resource(KEYS[i]), 'x', ARGV[1], ARGV[2], ARGV[3] or '', '', '', ARGV[4] or 'P')
  if type(res) == 'string' then
    tokens[i] = res
  elseif res[1] == TAKEN then
    tokens[i], most = res[2], math.max(most, res[3])
  else
    local out = {res[1], i - 1, res[2] or ''}
    for j = 1, i - 1 do
      out[j + 3] = tokens[j]
    end
    return out
  end
end
local out = {TAKEN, most}
for j = 1, n do
  out[j + 2] = tokens[j]
end
return out
