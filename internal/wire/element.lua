-- Reads the queue element of the includer's local element, "<id>.<n>.<lease ms><rules>" and
-- perhaps "~<label>", into its locals id (nil for anything else, which is dropped), lease,
-- kind and rules: the rules are 'f' (tokens floored at the server clock) or 'e<ms>' (the
-- counter expires; floored too), which token.lua reads, then 's' (shared) or 'l<n>' (one of n
-- slots), neither for exclusive ('x'). The Go side is wire.ParseElement; TestGrammarAlike
-- holds them together. Pasted, not called (see token.lua).
do
  id, lease, rules = string.match(element, '^([^.]*)%.%d+%.(%d+)([^~]*)')
  kind = 'x'
  if id then
    local n = string.match(rules, 'l(%d+)')
    kind = string.find(rules, 's', 1, true) and 's' or n and 'l' .. n or 'x'
  end
end
