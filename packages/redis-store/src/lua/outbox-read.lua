-- outbox-read: the oldest entries of a group's outbox on a shard, each with
-- the shard it is routed to now (docs/exactly-once.md, "The outbox").
-- KEYS[1] outbox stream   KEYS[2] its re-routes (hash: entry id -> shard)
-- ARGV[1] count
-- Entry fields: shardline-target, <stream>, shardline-shard, <shard>,
-- shardline-key, <key>, then the send's own fields (commit.lua writes them).
-- -> {0, {{id, {field, value, ...}, route}, ...}} | {2, key, msg}
return run(function()
  local outbox, routes = KEYS[1], KEYS[2]
  expect_type(outbox, 'stream')
  expect_type(routes, 'hash')
  local out = {}
  for _, e in ipairs(ccall(outbox, 'XRANGE', outbox, '-', '+', 'COUNT', tonumber(ARGV[1]))) do
    local route = ccall(routes, 'HGET', routes, e[1])
    if route == false then route = e[2][4] end
    out[#out + 1] = { e[1], e[2], route }
  end
  return { 0, out }
end)
