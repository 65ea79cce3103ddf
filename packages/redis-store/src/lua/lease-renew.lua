-- lease renew / release: compare-on-token.
-- KEYS[1] lease <prefix>group:{<stream>:<group>}:lease
-- ARGV[1] holder  ARGV[2] token  ARGV[3] "renew" | "release"  ARGV[4] ttl ms (renew)
-- -> {0} done | {5} not held with this token (expired, taken over) | {2, key, msg}
return run(function()
  local lease = KEYS[1]
  local current = ccall(lease, 'HMGET', lease, 'holder', 'token')
  if str(current[1]) ~= ARGV[1] or str(current[2]) ~= ARGV[2] then return { 5 } end
  if ARGV[3] == 'renew' then
    ccall(lease, 'PEXPIRE', lease, ARGV[4])
  else
    ccall(lease, 'DEL', lease)
  end
  return { 0 }
end)
