-- retireShard: delete a retired shard's stream and the named groups' owner
-- tokens; the seal marker and the dead-letter stream stay. Idempotent.
-- KEYS[1] shard stream   KEYS[2..] owner tokens <prefix>{<stream>:<shard>}:owner:<group>
-- -> {0} | {2, key, msg} (a value of another type: nothing deleted)
return run(function()
  local stream = KEYS[1]
  expect_type(stream, 'stream')
  for i = 2, #KEYS do owner_token(KEYS[i]) end
  ccall(stream, 'DEL', unpack(KEYS))
  return { 0 }
end)
