-- commit: a GROUP of transactions (the messages of one shard's batch, in
-- stream order; a single commit is a group of one) and the acknowledgement
-- of the messages each covers, in ONE fenced, atomic step
-- (docs/exactly-once.md, "The commit" and "Group commit").
-- The loader prepends the prelude and the allow-list (core's
-- Transaction.COMMANDS): `TX`, command -> the type it works on, and `TXC`,
-- command -> the counter it changes.
-- KEYS[1] shard stream  KEYS[2] owner token  KEYS[3] the group's outbox
-- KEYS[4..] every other key it touches (declared for the cluster and the ACL)
-- ARGV[1] token  ARGV[2] group  ARGV[3] ack mode "ack" | "xackdel"
-- ARGV[4] "1": XACKDEL ... ACKED exists (Redis >= 8.2)  ARGV[5] "direct" | "outbox"
-- ARGV[6] the lowest id of every part, ARGV[7] the highest, ARGV[8] how many ids
-- ARGV[9] n parts  ARGV[10] 0, or the index in KEYS of the shard's gate key:
-- the commit rides the shard's next read (docs/exactly-once.md, "The commit
-- rides the read"), whose gate it opens once every part committed
-- then: per part: n ids, ids...; n writes, per write: command, n
-- keys, the index in KEYS of each, n other args, args...; n sends, per
-- send: the index in KEYS of the target shard stream and of its seal marker
-- (0 with the outbox), target stream, shard, routing key, n field items,
-- field, value, ...
-- (keys are named through KEYS, never ARGV: a client's key prefix applies)
-- Order, and why nothing is ever half done:
-- 1. the owner token, once (a stale owner writes nothing, acks nothing);
-- 2. which ids are pending in the group: one XPENDING over [lowest, highest]
--    (paged), not one per id; when its first page holds every id in order
--    (the usual case) that alone proves them all pending;
-- 3. each part in order: none of its ids pending, it committed before
--    (skipped, "already"); some: it stops the group ({10, ids not
--    pending}); else every write checked against the keys as the writes
--    before it (this part's and the earlier parts') leave them, and every
--    direct send's target (not sealed, a stream): a refusal ({11, ...} or
--    {8, send}) stops the group at this part. A part after a stop is never
--    looked at: a later message never commits when an earlier one failed;
-- 4. the writes and sends of the parts before the stop, in order, then one
--    ack of their ids. Nothing is written before every check of those
--    parts passed. Redis refuses a write for want of memory only at a
--    script's first write, before anything changed.
-- -> {0, {1 committed | 0 already, ... per part before the stop}, stop[, gate]}
--    gate (with ARGV[10] and no stop): 1 opened (the stream moved to the gate
--    key) | 0 shut (the gate key holds a value: not ours, left alone)
--    stop: 0 none | 10, id, ... not pending | 8, send index: target sealed
--    | 11, write index, reason, key, message: refused
--    | {1, current} | {12} token missing | {13, what} vanished | {2, key, msg}
local MAX = 9007199254740991

local function refuse(index, reason, key, message)
  error({ refused = true, index = index, reason = reason, key = key, message = message })
end

-- a canonical decimal integer within +-MAX (core's Transaction.isInteger)
local function is_int_str(s)
  if s == '0' then return true end
  local digits = string.match(s, '^%-?([1-9]%d*)$')
  if digits == nil or #digits > 16 then return false end
  return #digits < 16 or digits <= '9007199254740991'
end

-- a finite decimal number (core's Transaction.isFiniteDecimal)
local function is_float_str(s)
  local mant, exp = string.match(s, '^[-+]?([%d%.]+)(.*)$')
  if mant == nil then return false end
  if not (string.match(mant, '^%d+%.?%d*$') or string.match(mant, '^%.%d+$')) then return false end
  if exp ~= '' and not string.match(exp, '^[eE][-+]?%d%d?%d?$') then return false end
  local v = tonumber(s)
  return v ~= nil and v == v and v ~= math.huge and v ~= -math.huge
end

-- a tracked value (a string read or set, or a number a counter left) as an
-- integer / a float, or nil when it is not one
local function int_of(v)
  if type(v) == 'number' then
    if v == math.floor(v) and v <= MAX and v >= -MAX then return v end
    return nil
  end
  if is_int_str(v) then return tonumber(v) end
  return nil
end
local function float_of(v)
  if type(v) == 'number' then return v end
  if is_float_str(v) then return tonumber(v) end
  return nil
end

local function main()
  local stream, owner, outbox = KEYS[1], KEYS[2], KEYS[3]
  local group, mode, native, sends_mode = ARGV[2], ARGV[3], ARGV[4] == '1', ARGV[5]
  fence(owner, tonumber(ARGV[1]))

  -- the parts, read in one pass over ARGV (no function call per argument:
  -- this runs for every message of a group)
  local gate = nil
  if ARGV[10] ~= '0' then gate = KEYS[tonumber(ARGV[10])] end
  local i = 11
  local parts = {}
  for p = 1, tonumber(ARGV[9]) do
    local n = tonumber(ARGV[i])
    local ids = { unpack(ARGV, i + 1, i + n) }
    i = i + n + 1
    local writes = {}
    for k = 1, tonumber(ARGV[i]) do
      local cmd, nkeys = ARGV[i + 1], tonumber(ARGV[i + 2])
      i = i + 3
      local args = {}
      for j = 1, nkeys do args[j] = KEYS[tonumber(ARGV[i + j - 1])] end
      i = i + nkeys
      local nargs = tonumber(ARGV[i])
      for j = 1, nargs do args[nkeys + j] = ARGV[i + j] end
      i = i + nargs
      writes[k] = { cmd = cmd, args = args }
    end
    i = i + 1
    local sends = {}
    for k = 1, tonumber(ARGV[i]) do
      local s = { key = KEYS[tonumber(ARGV[i + 1])], sealed = KEYS[tonumber(ARGV[i + 2])], stream = ARGV[i + 3], shard = ARGV[i + 4], rkey = ARGV[i + 5] }
      local nf = tonumber(ARGV[i + 6])
      s.fields = { unpack(ARGV, i + 7, i + 6 + nf) }
      i = i + 6 + nf
      sends[k] = s
    end
    i = i + 1
    parts[p] = { ids = ids, writes = writes, sends = sends }
  end

  -- 2. which ids are pending: one XPENDING over the parts' range, paged
  -- (other entries pending in the range only make it page); a key of
  -- another type: XPENDING's WRONGTYPE refuses the commit as a foreign
  -- value, {2, ...}
  local pending = {}
  -- every id of the group pending: the usual case, found without the table
  local all_pending = false
  local from, to, total = ARGV[6], ARGV[7], tonumber(ARGV[8]) + 1
  -- each id of every part, in order, among a page's entries (XPENDING lists
  -- them by id; the parts' ids come in stream order when the runtime sends
  -- them): one walk comparing interned strings. Finding all of them proves
  -- them pending; not finding one proves nothing, and the table decides.
  local function all_in(page)
    local k, n = 1, #page
    for p = 1, #parts do
      for _, id in ipairs(parts[p].ids) do
        while k <= n and page[k][1] ~= id do k = k + 1 end
        if k > n then return false end
        k = k + 1
      end
    end
    return true
  end
  local first = true
  while true do
    local page = rcall(stream, 'XPENDING', stream, group, from, to, total)
    -- the group (or the stream) vanished under the token: VANISHED, never
    -- "already committed" (which would drop the writes: docs/protocol.md rule 26)
    if is_err(page, 'NOGROUP') or is_err(page, 'ERR no such key') then vanished(stream) end
    if is_err(page, '') then error(page) end
    if first and #page < total and all_in(page) then
      all_pending = true
      break
    end
    first = false
    for _, e in ipairs(page) do pending[e[1]] = true end
    if #page < total then break end
    from = '(' .. page[#page][1]
  end

  -- 3. each part, as the writes before it leave the keys (nothing written yet)
  local sim = {}
  -- a key as the writes before leave it; when a counter write first sees
  -- it, one GET (HGET of its field) reads its type and value together:
  -- another type answers WRONGTYPE (then TYPE names it for the refusal)
  local function state(key, want, field)
    local s = sim[key]
    if s ~= nil then return s end
    if want == 'string' or field ~= nil then
      local v
      if field == nil then v = redis.pcall('GET', key) else v = redis.pcall('HGET', key, field) end
      if is_err(v, 'WRONGTYPE') then
        s = { t = type_of(key), fresh = false, f = {} }
      elseif is_err(v, '') then
        error(v)
      elseif field ~= nil then
        -- a hash or no key: either takes the write; other fields are read when needed
        s = { t = want, fresh = false, f = { [field] = v } }
      elseif v == false then
        s = { t = 'none', fresh = true, f = {} }
      else
        s = { t = 'string', fresh = false, f = {}, str = v }
      end
    else
      local t = type_of(key)
      s = { t = t, fresh = t == 'none', f = {} }
    end
    sim[key] = s
    return s
  end
  local function gone(key) sim[key] = { t = 'none', fresh = true, f = {} } end
  local function str_value(key, s)
    if s.str == nil then
      if s.fresh then s.str = '0' else s.str = redis.call('GET', key) or '0' end
    end
    return s.str
  end
  local function field_value(key, s, field)
    local v = s.f[field]
    if v == nil then
      if s.fresh then
        v = false
      else
        v = redis.call('HGET', key, field)
      end
      s.f[field] = v
    end
    if v == false then return '0' end
    return v
  end
  local function simulate(writes)
    for k, w in ipairs(writes) do
      local t, c = TX[w.cmd], TXC[w.cmd]
      if t == nil then refuse(k - 1, 'CommandNotAllowed', w.args[1] or '', w.cmd .. ' is not a transaction command') end
      local key = w.args[1]
      if w.cmd == 'DEL' then
        for _, dk in ipairs(w.args) do gone(dk) end
      elseif t == 'overwrite' then
        sim[key] = { t = 'string', fresh = true, f = {}, str = w.args[2] }
      elseif t ~= 'any' then
        local field = nil
        if c == 'hashInt' or c == 'hashFloat' then field = w.args[2] end
        local s = state(key, t, field)
        if s.t ~= 'none' and s.t ~= t then
          refuse(k - 1, 'WrongType', key, 'holds a ' .. s.t .. ', the command works on a ' .. t)
        end
        s.t = t
        if c == 'int' then
          local cur = int_of(str_value(key, s))
          if cur == nil then refuse(k - 1, 'NotANumber', key, 'the value is not an integer') end
          local by = 1
          if w.cmd == 'DECR' then by = -1 end
          if w.cmd == 'INCRBY' then by = tonumber(w.args[2]) end
          if w.cmd == 'DECRBY' then by = -tonumber(w.args[2]) end
          local nxt = cur + by
          if nxt > MAX or nxt < -MAX then refuse(k - 1, 'OutOfRange', key, 'the result leaves +-' .. MAX) end
          s.str = nxt
        elseif c == 'float' then
          local cur = float_of(str_value(key, s))
          if cur == nil then refuse(k - 1, 'NotANumber', key, 'the value is not a number') end
          local nxt = cur + tonumber(w.args[2])
          if nxt ~= nxt or nxt == math.huge or nxt == -math.huge then
            refuse(k - 1, 'OutOfRange', key, 'the result is not finite')
          end
          s.str = nxt
        elseif c == 'hashInt' or c == 'hashFloat' then
          local raw = field_value(key, s, field)
          if c == 'hashInt' then
            local cur = int_of(raw)
            if cur == nil then refuse(k - 1, 'NotANumber', key, 'field ' .. field .. ' is not an integer') end
            local nxt = cur + tonumber(w.args[3])
            if nxt > MAX or nxt < -MAX then refuse(k - 1, 'OutOfRange', key, 'the result leaves +-' .. MAX) end
            s.f[field] = nxt
          else
            local cur = float_of(raw)
            if cur == nil then refuse(k - 1, 'NotANumber', key, 'field ' .. field .. ' is not a number') end
            local nxt = cur + tonumber(w.args[3])
            if nxt ~= nxt or nxt == math.huge or nxt == -math.huge then
              refuse(k - 1, 'OutOfRange', key, 'the result is not finite')
            end
            s.f[field] = nxt
          end
        elseif w.cmd == 'HSET' then
          for j = 2, #w.args, 2 do s.f[w.args[j]] = w.args[j + 1] end
        elseif w.cmd == 'HDEL' then
          for j = 2, #w.args do s.f[w.args[j]] = false end
        end
      end
    end
  end

  local done = {}
  local stop = nil
  local sealed_seen = {}
  local any_commits = false
  for p, part in ipairs(parts) do
    local missing = {}
    if not all_pending then
      for _, id in ipairs(part.ids) do
        if not pending[id] then missing[#missing + 1] = id end
      end
    end
    if #missing == #part.ids then
      -- committed before (its reply was lost, or it was sent twice): nothing to do
      done[p] = 0
    elseif #missing > 0 then
      stop = { 10 }
      for _, id in ipairs(missing) do stop[#stop + 1] = id end
      break
    else
      local ok, err = pcall(simulate, part.writes)
      if not ok then
        if type(err) == 'table' and err.refused then
          stop = { 11, err.index, err.reason, err.key, err.message }
          break
        end
        error(err)
      end
      -- direct sends: the target takes appends (not sealed) and is a stream
      if sends_mode == 'direct' then
        for k, s in ipairs(part.sends) do
          if sealed_seen[s.sealed] == nil then
            sealed_seen[s.sealed] = ccall(s.sealed, 'EXISTS', s.sealed) == 1
            expect_type(s.key, 'stream')
          end
          if sealed_seen[s.sealed] then
            stop = { 8, k - 1 }
            break
          end
        end
        if stop ~= nil then break end
      end
      done[p] = 1
      any_commits = true
    end
  end
  if any_commits and sends_mode ~= 'direct' then expect_type(outbox, 'stream') end

  -- 4. everything of the parts before the stop, now that none can refuse
  local acks = {}
  for p, flag in ipairs(done) do
    if flag == 1 then
      local part = parts[p]
      for _, w in ipairs(part.writes) do ccall(w.args[1], w.cmd, unpack(w.args)) end
      for _, s in ipairs(part.sends) do
        if sends_mode == 'direct' then
          local args = { 'XADD', s.key, '*' }
          for _, f in ipairs(s.fields) do args[#args + 1] = f end
          args[#args + 1] = 'shardline-key'
          args[#args + 1] = s.rkey
          ccall(s.key, unpack(args))
        else
          local args = { 'XADD', outbox, '*', 'shardline-target', s.stream, 'shardline-shard', s.shard, 'shardline-key', s.rkey }
          for _, f in ipairs(s.fields) do args[#args + 1] = f end
          ccall(outbox, unpack(args))
        end
      end
      for _, id in ipairs(part.ids) do acks[#acks + 1] = id end
    end
  end
  acknowledge(stream, group, mode, native, acks)
  local out = { 0, done }
  if stop == nil then
    out[3] = 0
    -- the gate of the read this commit carries: it opens only when the whole
    -- group committed, so a group that stops leaves it shut and the read
    -- reads nothing by construction (as a stale token does)
    if gate ~= nil then out[4] = redis.call('RENAMENX', stream, gate) end
  else
    for _, v in ipairs(stop) do out[#out + 1] = v end
  end
  return out
end

return run(main)
