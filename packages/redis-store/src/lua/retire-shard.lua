-- retireShard: delete a retired shard's stream, the named groups' owner
-- tokens and their relayed (empty) outboxes with their re-routes; the seal
-- marker and the dead-letter stream stay. An outbox that still holds an
-- entry stays as it is (a drained shard's outbox is empty: its owner
-- reports it drained only then, docs/exactly-once.md, "Resharding and the
-- outbox"; kept, nothing is lost). Idempotent.
-- KEYS[1] shard stream   KEYS[2 .. n+1] owner tokens <prefix>{<stream>:<shard>}:owner:<group>
-- KEYS[n+2 ..] per group: its outbox, its outbox's re-routes   ARGV[1] n (groups)
-- -> {0} | {2, key, msg} (a value of another type: nothing deleted)
return run(function()
  local stream, n = KEYS[1], tonumber(ARGV[1] or (#KEYS - 1))
  expect_type(stream, 'stream')
  local gone = { stream }
  for i = 2, n + 1 do
    owner_token(KEYS[i])
    gone[#gone + 1] = KEYS[i]
  end
  for i = n + 2, #KEYS, 2 do
    local outbox, routes = KEYS[i], KEYS[i + 1]
    if expect_type(outbox, 'stream') then
      expect_type(routes, 'hash')
      if #ccall(outbox, 'XRANGE', outbox, '-', '+', 'COUNT', 1) == 0 then
        gone[#gone + 1] = outbox
        gone[#gone + 1] = routes
      end
    end
  end
  ccall(stream, 'DEL', unpack(gone))
  return { 0 }
end)
