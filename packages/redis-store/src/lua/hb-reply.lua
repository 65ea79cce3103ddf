-- heartbeat answers: push each to its list (a member-side transport's inbox,
-- or an inbox-less request's own reply list), which expires if nobody pops
-- it. The answers to one popped batch go in one call, but each list stands
-- alone: one that holds a foreign value is skipped (and counted), the others
-- are answered.
-- KEYS[i] <prefix>group:{<stream>:<group>}:hb:inbox:<inboxId> or ...:hb:reply:<requestId>
-- ARGV[i] the answer for KEYS[i]  ARGV[#KEYS + 1] ttl ms
-- -> {0, skipped} | {9, msg}
return run(function()
  local ttl, skipped = ARGV[#KEYS + 1], 0
  for i, reply in ipairs(KEYS) do
    local pushed = redis.pcall('RPUSH', reply, ARGV[i])
    if type(pushed) == 'table' and pushed.err then
      if not string.find(pushed.err, 'WRONGTYPE', 1, true) then error(pushed) end
      skipped = skipped + 1
    else
      ccall(reply, 'PEXPIRE', reply, ttl)
    end
  end
  return { 0, skipped }
end)
