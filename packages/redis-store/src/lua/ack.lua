-- ack: fenced acknowledgement of entries of one shard.
-- KEYS[1] shard stream   KEYS[2] owner token
-- ARGV[1] token  ARGV[2] group  ARGV[3] mode: "ack" | "xackdel"
-- ARGV[4] "1": the server has XACKDEL (Redis >= 8.2)   ARGV[5..] entry ids
-- "xackdel" deletes exactly the entries this call acknowledged (XACKDEL
-- KEEPREF semantics): an id not pending in the group is neither acked nor deleted.
-- -> {0, acknowledged} | {1, current} | {2, key, msg}
return run(function()
  local stream, owner, group, mode = KEYS[1], KEYS[2], ARGV[2], ARGV[3]
  fence(owner, tonumber(ARGV[1]))
  local ids = { unpack(ARGV, 5) }
  if #ids == 0 then return { 0, 0 } end
  if mode == 'ack' then
    return { 0, ccall(stream, 'XACK', stream, group, unpack(ids)) }
  end
  if ARGV[4] == '1' then
    local results = ccall(stream, 'XACKDEL', stream, group, 'IDS', #ids, unpack(ids))
    local n = 0
    for _, r in ipairs(results) do
      if r == 1 then n = n + 1 end
    end
    return { 0, n }
  end
  -- Redis < 8.2: XACK then XDEL of what was acked, in one script (atomic)
  local n = 0
  local acked = {}
  for _, id in ipairs(ids) do
    if ccall(stream, 'XACK', stream, group, id) == 1 then
      n = n + 1
      acked[#acked + 1] = id
    end
  end
  if #acked > 0 then ccall(stream, 'XDEL', stream, unpack(acked)) end
  return { 0, n }
end)
