-- setOwnerToken: the coordinator's fence; raises the token only.
-- KEYS[1] owner token  {<stream>:<shard>}:owner:<group>
-- ARGV[1] token (decimal integer)
-- -> {0} set (or equal: no-op) | {3, current} lower than stored | {2, key, msg}
return run(function()
  local key, token = KEYS[1], tonumber(ARGV[1])
  local current = owner_token(key)
  if token < current then return { 3, current } end
  if token > current then ccall(key, 'SET', key, ARGV[1]) end
  return { 0 }
end)
