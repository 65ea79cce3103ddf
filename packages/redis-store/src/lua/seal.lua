-- seal: mark a shard of an earlier layout generation; appends are refused from now on.
-- KEYS[1] seal marker <prefix>{<stream>:<shard>}:sealed (string "1")
-- -> {0} (idempotent) | {2, key, msg} a value of another type is there
return run(function()
  local sealed = KEYS[1]
  expect_type(sealed, 'string')
  ccall(sealed, 'SET', sealed, '1')
  return { 0 }
end)
