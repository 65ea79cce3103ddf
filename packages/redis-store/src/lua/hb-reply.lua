-- heartbeat response: push it to the request's own reply list, which
-- expires if the member gave up (timed out) and never pops it.
-- KEYS[1] reply {shardline:<stream>:<group>}:hb:reply:<requestId>
-- ARGV[1] response JSON  ARGV[2] ttl ms
-- -> {0} | {2, key, msg}
return run(function()
  local reply = KEYS[1]
  ccall(reply, 'RPUSH', reply, ARGV[1])
  ccall(reply, 'PEXPIRE', reply, ARGV[2])
  return { 0 }
end)
