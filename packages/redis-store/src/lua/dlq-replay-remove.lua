-- dlq-replay-remove: a replayed dead letter leaves its dead-letter stream,
-- with its replay route (docs/redis.md, "Dead letters and groups"); the
-- target's mark is removed after this (another slot), so a run cut between
-- the two leaves a mark nobody reads again, never a letter without one.
-- KEYS[1] the dead-letter stream  KEYS[2] its replay routes (hash)   ARGV dead-letter ids
-- -> {0, removed} | {2, key, msg}
return run(function()
  local dlq, routes = KEYS[1], KEYS[2]
  expect_type(dlq, 'stream')
  expect_type(routes, 'hash')
  local n = ccall(dlq, 'XDEL', dlq, unpack(ARGV))
  ccall(routes, 'HDEL', routes, unpack(ARGV))
  return { 0, n }
end)
