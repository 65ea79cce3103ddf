-- dlq-replay-route: where a dead letter is replayed to, decided once
-- (docs/redis.md, "Dead letters and groups"). Recorded in the dead-letter
-- stream's slot, so a replay run again (after a crash between its append and
-- its removal, however late) appends to the shard the first run chose, whose
-- mark (dlq-replay-append.lua) says whether it already got the letter; a
-- reshard meanwhile cannot route it to a second shard.
-- KEYS[1] the dead-letter stream <prefix>{<stream>:<shard>}:dlq
-- KEYS[2] its replay routes <prefix>{<stream>:<shard>}:dlq:replays (hash: dead-letter id -> shard)
-- ARGV[1] dead-letter id   ARGV[2] the shard its key routes to now ('' = none: a keyless
--   letter whose shard is no longer written to)
-- ARGV[3] '' (first call) or the recorded shard the caller found sealed before it
--   got the letter: then the route moves to ARGV[2], unless another run moved it first
-- -> {0, shard} routed there | {0, -1} the letter is gone (replayed or purged) |
--    {0, -2} no route (ARGV[2] '' and nothing recorded) | {2, key, msg}
return run(function()
  local dlq, routes, id, proposed, sealed = KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3]
  expect_type(dlq, 'stream')
  expect_type(routes, 'hash')
  if #ccall(dlq, 'XRANGE', dlq, id, id) == 0 then
    ccall(routes, 'HDEL', routes, id)
    return { 0, -1 }
  end
  local current = ccall(routes, 'HGET', routes, id)
  if current ~= false and current ~= sealed then return { 0, tonumber(current) } end
  if proposed == '' then return { 0, -2 } end
  ccall(routes, 'HSET', routes, id, proposed)
  return { 0, tonumber(proposed) }
end)
