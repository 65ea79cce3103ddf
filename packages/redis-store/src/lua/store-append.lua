-- store append: compare-and-set on the revision, then append one record
-- batch and its audit events. Cost: the batch and its events, never the
-- group's size (no snapshot is read or written here).
-- KEYS[1] revision   KEYS[2] snapshot   KEYS[3] batches   KEYS[4] audit ...:audit (stream)
-- ARGV[1] expected revision  ARGV[2] record batch (JSON)  ARGV[3] audit MAXLEN (~)
-- ARGV[4..] audit events (JSON), one stream entry each (field "event")
-- -> {0, revision, batches stored} | {1, actual revision} stale | {2, key, msg}
return run(function()
  local revision = store_revision(KEYS)
  expect_type(KEYS[4], 'stream')
  if revision ~= tonumber(ARGV[1]) then return { 1, revision } end
  local batches = redis.call('RPUSH', KEYS[3], ARGV[2])
  local next_revision = revision + 1
  redis.call('SET', KEYS[1], string.format('%d', next_revision))
  for i = 4, #ARGV do
    redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[3], '*', 'event', ARGV[i])
  end
  return { 0, next_revision, batches }
end)
