-- read: fenced consumer-group read of one shard, in stream order.
-- KEYS[1] shard stream <prefix>{<stream>:<shard>}   KEYS[2] owner token <prefix>{<stream>:<shard>}:owner:<group>
-- ARGV[1] token  ARGV[2] group  ARGV[3] consumer  ARGV[4] count
-- ARGV[5] mode: "new" (XREADGROUP >), "pending" (this consumer's own PEL),
--               "claim" (idle pending entries of any consumer first, then new)
-- ARGV[6] claim min idle ms ("claim" only)
-- ARGV[7] "1": the server has XREADGROUP ... CLAIM (Redis >= 8.4), else XAUTOCLAIM
-- ARGV[8] "" or an ack mode ("ack" | "xackdel", as ack.lua): acknowledge
--         ARGV[10..] first (the previous batch), after the fence
-- ARGV[9] "1": the server has XACKDEL ... ACKED (Redis >= 8.2)
-- The group exists from its token's first write (set-owner-token.lua): a
-- group or stream missing under the token VANISHED (prelude's `vanished`),
-- never read as empty nor created again here (docs/protocol.md rule 26;
-- a shard sealed without a stream, VANISHED 'stream' here, reads empty:
-- the caller looks at the seal, so that the script names no key that may
-- not exist, which a cluster refuses while the slot migrates).
-- -> {0, {{id, {field, value, ...}[, deliveryCount]}, ...}} | {1, current} | {12}
--    | {13, what} | {2, key, msg}
--    (an entry without a count was delivered for the first time: count 1;
--    new entries are returned as XREADGROUP gives them, no copy in Lua)
return run(function()
  local stream, owner = KEYS[1], KEYS[2]
  local group, consumer, count, mode = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
  fence(owner, tonumber(ARGV[1]))
  if ARGV[8] ~= '' then acknowledge(stream, group, ARGV[8], ARGV[9] == '1', { unpack(ARGV, 10) }) end

  -- VANISHED when the group is not there; false when it is
  local function no_group(reply)
    -- XGROUP CREATECONSUMER (a pending read) says so of a missing key in its own words
    if is_err(reply, 'NOGROUP') or is_err(reply, 'ERR The XGROUP subcommand requires the key') then
      vanished(stream)
    end
    if type(reply) == 'table' and reply.err then error(reply) end
    return false
  end

  local out = {}
  -- XREADGROUP > (optionally with CLAIM)
  local function read_new(n, claim_idle)
    local args = { 'XREADGROUP', 'GROUP', group, consumer, 'COUNT', n }
    if claim_idle then
      args[#args + 1] = 'CLAIM'
      args[#args + 1] = claim_idle
    end
    args[#args + 1] = 'STREAMS'
    args[#args + 1] = stream
    args[#args + 1] = '>'
    local reply = rcall(stream, unpack(args))
    if no_group(reply) then return end
    if not reply then return end
    if not claim_idle and #out == 0 then
      out = reply[1][2]
      return
    end
    for _, e in ipairs(reply[1][2]) do
      -- with CLAIM each entry is {id, fields, idle, previous delivery count} (0 for new ones)
      if claim_idle then
        out[#out + 1] = { e[1], e[2], (e[4] or 0) + 1 }
      else
        out[#out + 1] = e
      end
    end
  end

  if mode == 'new' then
    read_new(count, nil)
  elseif mode == 'claim' and ARGV[7] == '1' then
    read_new(count, ARGV[6])
  elseif mode == 'claim' then
    local reply = rcall(stream, 'XAUTOCLAIM', stream, group, consumer, ARGV[6], '0-0', 'COUNT', count)
    if no_group(reply) then return { 0, out } end
    for _, e in ipairs(reply[2]) do
      out[#out + 1] = { e[1], e[2], deliveries(stream, group, e[1]) }
    end
    -- new entries only once every idle pending entry was scanned, so a
    -- takeover re-delivers the previous owner's entries before new ones
    if #out < count and reply[1] == '0-0' then read_new(count - #out, nil) end
  else
    -- "pending": this consumer's PEL in id order; entries deleted from the
    -- stream are skipped (claimPending reports them), so page until `count`
    local reply = rcall(stream, 'XGROUP', 'CREATECONSUMER', stream, group, consumer)
    if no_group(reply) then return { 0, out } end
    local start = '-'
    while #out < count do
      local page = ccall(stream, 'XPENDING', stream, group, start, '+', count, consumer)
      for _, p in ipairs(page) do
        local entry = ccall(stream, 'XRANGE', stream, p[1], p[1])
        if #entry > 0 and #out < count then out[#out + 1] = { p[1], entry[1][2], p[4] } end
      end
      if #page < count then break end
      start = '(' .. page[#page][1]
    end
  end
  return { 0, out }
end)
