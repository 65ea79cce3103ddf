-- outbox-reroute: move an outbox entry whose target shard was sealed before
-- it got the entry to a shard of the target's newer layout, unless another
-- relayer moved it first (docs/exactly-once.md, "The outbox"): recorded in
-- the source's slot, so that two relayers never deliver one entry to two shards.
-- KEYS[1] outbox stream  KEYS[2] its re-routes (hash)
-- ARGV[1] entry id  ARGV[2] the sealed shard it was routed to  ARGV[3] the new shard
-- -> {0, shard routed to now} | {0, -1} the entry is gone (delivered and removed) | {2, key, msg}
return run(function()
  local outbox, routes, id = KEYS[1], KEYS[2], ARGV[1]
  expect_type(outbox, 'stream')
  expect_type(routes, 'hash')
  local current = ccall(routes, 'HGET', routes, id)
  if current == false then
    local e = ccall(outbox, 'XRANGE', outbox, id, id)
    if #e == 0 then return { 0, -1 } end
    current = e[1][2][4]
  end
  if current ~= ARGV[2] then return { 0, tonumber(current) } end
  ccall(routes, 'HSET', routes, id, ARGV[3])
  return { 0, tonumber(ARGV[3]) }
end)
