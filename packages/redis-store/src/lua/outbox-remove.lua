-- outbox-remove: forget delivered outbox entries and their re-routes
-- (docs/exactly-once.md, "The outbox"). The outbox stream itself stays (its
-- last id keeps growing, so a later entry is never mistaken for a delivered one).
-- KEYS[1] outbox stream  KEYS[2] its re-routes (hash)   ARGV entry ids
-- -> {0, removed} | {2, key, msg}
return run(function()
  local outbox, routes = KEYS[1], KEYS[2]
  expect_type(outbox, 'stream')
  expect_type(routes, 'hash')
  local n = ccall(outbox, 'XDEL', outbox, unpack(ARGV))
  ccall(routes, 'HDEL', routes, unpack(ARGV))
  return { 0, n }
end)
