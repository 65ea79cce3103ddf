-- store append: compare-and-set on the revision, then append one record
-- batch and its audit events. Cost: the batch and its events, never the
-- group's size (no snapshot is read or written here).
-- With a lease fence (ARGV[5] not empty) the group's coordinator lease must
-- still be held by ARGV[4] under token ARGV[5] (docs/protocol.md rule 32):
-- the lease key shares the Store's slot, so this read and the append are one
-- atomic step, and a Store failover rewinds both alike.
-- KEYS[1] revision   KEYS[2] snapshot   KEYS[3] batches   KEYS[4] audit ...:audit (stream)
-- KEYS[5] lease ...:lease (hash: holder, token)
-- ARGV[1] expected revision  ARGV[2] record batch (JSON)  ARGV[3] audit MAXLEN (~)
-- ARGV[4] fence holder  ARGV[5] fence token ('' = no fence)
-- ARGV[6..] audit events (JSON), one stream entry each (field "event")
-- -> {0, revision, batches stored} | {1, actual revision} stale
--    | {5} lease not held under the fence's token (nothing written) | {2, key, msg}
return run(function()
  local revision = store_revision(KEYS)
  expect_type(KEYS[4], 'stream')
  if ARGV[5] ~= '' then
    expect_type(KEYS[5], 'hash')
    local lease = redis.call('HMGET', KEYS[5], 'holder', 'token')
    if str(lease[1]) ~= ARGV[4] or str(lease[2]) ~= ARGV[5] then return { 5 } end
  end
  if revision ~= tonumber(ARGV[1]) then return { 1, revision } end
  local batches = redis.call('RPUSH', KEYS[3], ARGV[2])
  local next_revision = revision + 1
  redis.call('SET', KEYS[1], string.format('%d', next_revision))
  for i = 6, #ARGV do
    redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[3], '*', 'event', ARGV[i])
  end
  return { 0, next_revision, batches }
end)
