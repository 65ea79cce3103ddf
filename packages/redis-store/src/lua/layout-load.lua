-- layout load: a stream's layout record and its revision.
-- KEYS[1] layout <prefix>stream:{<stream>}:layout (hash: record JSON, revision)
-- -> {0, record, revision} | {0} none | {2, key, msg}
return run(function()
  local layout = KEYS[1]
  if not expect_type(layout, 'hash') then return { 0 } end
  local fields = redis.call('HMGET', layout, 'record', 'revision')
  local record, revision = str(fields[1]), str(fields[2])
  if not record or not revision or not string.match(revision, '^%d+$') or #revision > 15 then
    foreign(layout, 'layout hash without a record and an integer revision')
  end
  return { 0, record, tonumber(revision) }
end)
