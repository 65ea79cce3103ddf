-- Prelude of every Shardline script: the loader prepends the helpers below
-- that a script names, and those they name (src/scripts.ts, `preludeFor`;
-- each helper is a closure made on every call), so a script may use any.
-- Scripts never raise a Redis error reply: they return a table whose first
-- element is a code (ioredis-mock turns {err=...} into undefined), and the
-- TypeScript side maps it:
--   {0, ...}            ok, with the script's payload
--   {1, current}        STALE: the caller's owner token is below `current`
--   {2, key, message}   FOREIGN: `key` holds a value Shardline did not write
--   {3, current}        REGRESSION: a token lower than `current` was to be set
--   {4, holder, pttl}   HELD: the lease is held by `holder` for `pttl` ms
--   {5}                 LOST: the lease is not held with this token
--   {6}                 UNAVAILABLE: nobody serves the group
--   {7, other}          REPLACED: another coordinator serves the group now
--   {8}                 SEALED: the shard refuses appends (a reshard sealed it)
--   {9, message}        unexpected error (bug or server refusal)
--   {10, id, ...}       NOT PENDING: a commit's messages are not all pending (commit.lua)
--   {11, i, reason, key, message}  REFUSED: a commit's write i cannot apply (commit.lua)
--   {12}                TOKEN MISSING: no owner token for the (shard, group): every token is refused
--   {13, what}          VANISHED: under a token that holds, the group's consumer group
--                       ('group') or the shard's stream ('stream') is gone
-- Every check happens before the first write, so a refused call changes nothing.
-- (docs/protocol.md rule 26: nothing Shardline stores disappears in silence.)

local function foreign(key, message)
  error({ shardline = 2, key = key, message = message })
end

-- redis.pcall that turns WRONGTYPE on `key` into FOREIGN and returns any
-- other error reply (a table with .err) for the caller to inspect.
local function rcall(key, ...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err and string.find(reply.err, 'WRONGTYPE', 1, true) then
    foreign(key, reply.err)
  end
  return reply
end

-- rcall that treats any error reply as unexpected.
local function ccall(key, ...)
  local reply = rcall(key, ...)
  if type(reply) == 'table' and reply.err then error(reply) end
  return reply
end

-- A bulk-string reply, or nil for a missing value (false in Redis; a JS
-- null in ioredis-mock's Lua).
local function str(v)
  if type(v) == 'string' then return v end
  if type(v) == 'number' then return string.format('%d', v) end
  return nil
end

local function is_err(reply, prefix)
  return type(reply) == 'table' and reply.err ~= nil and string.sub(reply.err, 1, #prefix) == prefix
end

-- The type of `key` ('none' when absent).
local function type_of(key)
  local t = ccall(key, 'TYPE', key)
  if type(t) == 'table' then return t.ok end
  return t
end

-- The owner token stored at `key`: nil when absent; FOREIGN unless a decimal integer.
local function stored_token(key)
  local raw = rcall(key, 'GET', key)
  if is_err(raw, '') then error(raw) end
  if raw == false then return nil end
  if not string.match(raw, '^%d+$') or #raw > 15 then
    foreign(key, 'owner token is not a non-negative integer: ' .. string.sub(raw, 1, 40))
  end
  return tonumber(raw)
end

-- The owner token stored at `key`: 0 when absent; FOREIGN unless a decimal integer.
local function owner_token(key)
  return stored_token(key) or 0
end

-- STALE unless `token` is at least the stored owner token; TOKEN MISSING when
-- none is stored, whatever `token`: the coordinator writes a grant's token
-- before it tells the member, so a missing one was deleted or evicted, and
-- comparing with 0 would let every token through (docs/protocol.md rule 26).
local function fence(key, token)
  local current = stored_token(key)
  if current == nil then error({ shardline = 12 }) end
  if token < current then error({ shardline = 1, current = current }) end
end

-- A command on `stream` found no group `group` (NOGROUP, or an ack that
-- acknowledged less than asked and XPENDING says NOGROUP) under a token
-- that holds. The token's first write created the group on the stream
-- (set-owner-token.lua), so it VANISHED: 'stream' when the key is gone,
-- 'group' when only the group is (a shard sealed by a reshard without a
-- stream is 'stream' too: the reads' callers look at its seal). Never
-- re-created here: a fenced seek does that.
local function vanished(stream)
  local t = type_of(stream)
  if t == 'stream' then error({ shardline = 13, what = 'group' }) end
  if t ~= 'none' then foreign(stream, 'holds a ' .. t .. ', expected a stream') end
  error({ shardline = 13, what = 'stream' })
end

-- VANISHED unless `group` exists on `stream` (XPENDING of one entry: NOGROUP
-- when the key or the group is gone).
local function check_group(stream, group)
  local p = rcall(stream, 'XPENDING', stream, group, '-', '+', 1)
  if is_err(p, 'NOGROUP') then vanished(stream) end
  if is_err(p, '') then error(p) end
end

local function run(main)
  local ok, result = pcall(main)
  if ok then return result end
  if type(result) == 'table' then
    if result.shardline == 1 then return { 1, result.current } end
    if result.shardline == 2 then return { 2, result.key, result.message } end
    if result.shardline == 12 then return { 12 } end
    if result.shardline == 13 then return { 13, result.what } end
    if result.err then return { 9, result.err } end
  end
  return { 9, tostring(result) }
end

-- The delivery count of a pending entry (XPENDING extended form), or nil.
local function deliveries(stream, group, id)
  local p = ccall(stream, 'XPENDING', stream, group, id, id, 1)
  if #p == 0 then return nil end
  return p[1][4]
end

-- Compare two stream ids `<ms>-<seq>` (decimal, any length): -1, 0 or 1.
local function id_cmp(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  local function num(x, y)
    x = (string.gsub(x, '^0+(%d)', '%1'))
    y = (string.gsub(y, '^0+(%d)', '%1'))
    if #x ~= #y then return #x < #y and -1 or 1 end
    if x == y then return 0 end
    return x < y and -1 or 1
  end
  local c = num(am, bm)
  if c ~= 0 then return c end
  return num(as, bs)
end

-- The ids among `ids` that every consumer group of `stream` is done with:
-- delivered to it (id <= its last-delivered-id) and not in its PEL. This is
-- XACKDEL ACKED's rule (Redis >= 8.2) for servers without it
-- (docs/runtime.md, "Ack policies and other groups": no group's ack removes
-- an entry another group of the stream has not acknowledged). A group
-- created later at an earlier id, or moved back by a seek, has not
-- delivered what follows its position: kept.
-- `acker` just acknowledged `ids`: its PEL holds none of them.
local function acked_by_all(stream, acker, ids)
  local groups = {}
  for _, g in ipairs(ccall(stream, 'XINFO', 'GROUPS', stream)) do
    local info = {}
    for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
    groups[#groups + 1] = { name = info['name'], last = info['last-delivered-id'] }
  end
  local done = {}
  for _, id in ipairs(ids) do
    local free = true
    for _, g in ipairs(groups) do
      if
        id_cmp(id, g.last) > 0
        or (g.name ~= acker and #ccall(stream, 'XPENDING', stream, g.name, id, id, 1) > 0)
      then
        free = false
        break
      end
    end
    if free then done[#done + 1] = id end
  end
  return done
end

-- Acknowledge `ids` of `group` on `stream` (the caller fenced first): how
-- many were pending and are now acknowledged. mode "ack": XACK; "xackdel":
-- also delete each entry this call acknowledged that every group of the
-- stream has acknowledged (XACKDEL ACKED semantics): with XACKDEL ... ACKED
-- when `native` (Redis >= 8.2), else XACK, then XDEL of what acked_by_all
-- allows. An id not pending in the group is neither acked nor deleted.
-- XACK and XACKDEL answer 0 / -1 for a group or stream that is gone, as for
-- an id not pending: when fewer than asked were acknowledged, VANISHED
-- unless the group is there (check_group), never "nothing was pending".
local function acknowledge(stream, group, mode, native, ids)
  if #ids == 0 then return 0 end
  local n = 0
  if mode == 'ack' then
    n = ccall(stream, 'XACK', stream, group, unpack(ids))
  elseif native then
    -- per id: 1 acked and deleted, 2 acked and kept (another group still needs it), -1 not pending
    local results = ccall(stream, 'XACKDEL', stream, group, 'ACKED', 'IDS', #ids, unpack(ids))
    for _, r in ipairs(results) do
      if r == 1 or r == 2 then n = n + 1 end
    end
  else
    local acked = {}
    for _, id in ipairs(ids) do
      if ccall(stream, 'XACK', stream, group, id) == 1 then acked[#acked + 1] = id end
    end
    if #acked > 0 then
      local done = acked_by_all(stream, group, acked)
      if #done > 0 then ccall(stream, 'XDEL', stream, unpack(done)) end
    end
    n = #acked
  end
  if n < #ids then check_group(stream, group) end
  return n
end

-- FOREIGN unless `key` is absent or of type `want`.
local function expect_type(key, want)
  local t = type_of(key)
  if t ~= 'none' and t ~= want then foreign(key, 'holds a ' .. t .. ', expected a ' .. want) end
  return t ~= 'none'
end

-- A group's Store keys, checked: the revision (0 when absent) and whether a
-- snapshot exists. FOREIGN for a key of the wrong type, a revision that is
-- not a decimal integer, or a snapshot or batches without a revision.
-- `keys`: { revision, snapshot, batches }.
local function store_revision(keys)
  local rev_key, snapshot_key, batches_key = keys[1], keys[2], keys[3]
  local has_rev = expect_type(rev_key, 'string')
  local has_snapshot = expect_type(snapshot_key, 'string')
  local has_batches = expect_type(batches_key, 'list')
  if not has_rev then
    if has_snapshot or has_batches then
      foreign(rev_key, 'a snapshot or batches are stored without a revision')
    end
    return 0, false
  end
  local raw = redis.call('GET', rev_key)
  if not string.match(raw, '^%d+$') or #raw > 15 then
    foreign(rev_key, 'store revision is not a non-negative integer: ' .. string.sub(raw, 1, 40))
  end
  return tonumber(raw), has_snapshot
end
