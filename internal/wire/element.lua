-- Reads element, "<id>.<n>.<lease ms><rules>[~<label>]", into the includer's locals id (nil
-- when it is none: dropped), lease, kind ('x', 's' or 'l<n>', from rules) and rules ('f' or
-- 'e<ms>' first, for token.lua). Go's side is wire.ParseElement (TestGrammarAlike). Pasted.
do
  id, lease, rules = string.match(element, '^([^.]*)%.%d+%.(%d+)([^~]*)')
  kind = 'x'
  if id and rules ~= '' then
    local n = string.match(rules, 'l(%d+)')
    kind = string.find(rules, 's', 1, true) and 's' or n and 'l' .. n or 'x'
  end
end
