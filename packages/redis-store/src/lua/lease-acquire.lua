-- lease acquire: one coordinator per group; every acquisition gets a
-- strictly larger fencing token (INCR of a per-group counter).
-- KEYS[1] lease <prefix>group:{<stream>:<group>}:lease (hash: holder, token; PX ttl)
-- KEYS[2] counter <prefix>group:{<stream>:<group>}:lease:counter
-- ARGV[1] holder  ARGV[2] ttl ms
-- -> {0, token} | {4, holder, pttl} held by another | {2, key, msg}
return run(function()
  local lease, counter, holder = KEYS[1], KEYS[2], ARGV[1]
  local fields = ccall(lease, 'HMGET', lease, 'holder', 'token')
  local current = { str(fields[1]), str(fields[2]) }
  local exists = ccall(lease, 'EXISTS', lease) == 1
  if exists and (not current[1] or not current[2] or not string.match(current[2], '^%d+$')) then
    foreign(lease, 'lease hash without holder and integer token')
  end
  if exists and current[1] ~= holder then
    return { 4, current[1], ccall(lease, 'PTTL', lease) }
  end
  local stored = str(ccall(counter, 'GET', counter))
  if stored and not string.match(stored, '^%d+$') then
    foreign(counter, 'lease counter is not a non-negative integer: ' .. string.sub(stored, 1, 40))
  end
  local token = ccall(counter, 'INCR', counter)
  -- a counter lost (or reset) below a live lease's token must not hand out that token again
  if exists and token <= tonumber(current[2]) then
    token = tonumber(current[2]) + 1
    ccall(counter, 'SET', counter, string.format('%d', token))
  end
  ccall(lease, 'HSET', lease, 'holder', holder, 'token', string.format('%d', token))
  ccall(lease, 'PEXPIRE', lease, ARGV[2])
  return { 0, token }
end)
