-- outbox-deliver: one outbox entry appended to its target shard, exactly once
-- per (source outbox, target shard) (docs/exactly-once.md, "The outbox").
-- Relayers deliver in outbox order, so the mark of the last delivered
-- outbox id says what this shard already got. The mark is checked before
-- the seal, as an idempotent append's window: an entry that landed before a
-- reshard sealed the shard is reported delivered, never re-routed.
-- KEYS[1] target shard stream  KEYS[2] its seal marker
-- KEYS[3] the mark {<target>:<n>}:relayed:<source stream>:<source shard>:<group>
-- ARGV[1] outbox entry id  ARGV[2..] field, value, ... (routing key included)
-- -> {0, 1, new id} appended | {0, 0} already delivered | {8} sealed | {2, key, msg}
return run(function()
  local target, sealed, mark, id = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
  if expect_type(mark, 'string') then
    local last = redis.call('GET', mark)
    if not string.match(last, '^%d+%-%d+$') then foreign(mark, 'not a stream id: ' .. string.sub(last, 1, 40)) end
    if id_cmp(last, id) >= 0 then return { 0, 0 } end
  end
  if ccall(sealed, 'EXISTS', sealed) == 1 then return { 8 } end
  expect_type(target, 'stream')
  local added = ccall(target, 'XADD', target, '*', unpack(ARGV, 2))
  ccall(mark, 'SET', mark, id)
  return { 0, 1, added }
end)
