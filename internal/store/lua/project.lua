-- project.lua: move a key to another project of its account, or delete a
-- project, atomically. A project's keys are kept in a set of their ids, so
-- that a project is deleted only while it has none and a key is never
-- left in a project that is gone.
--
-- Move (ARGV[1] "move"):
-- KEYS[1]  gw:{acct:ID}:key:KEYID          hash: the key's metadata, "project"
--                                            ("" or absent: the default project)
-- KEYS[2]  gw:{acct:ID}:proj:PROJECTID     hash: the target project (unused for
--                                            the default project)
-- KEYS[3]  gw:{acct:ID}:pkeys:OLD          set: the keys of the key's project
-- KEYS[4]  gw:{acct:ID}:pkeys:NEW          set: the keys of the target project
-- ARGV[2]  the key's project as the caller read it ("" for the default)
-- ARGV[3]  the target project ("" for the default)
-- ARGV[4]  the key's id
--
-- Delete (ARGV[1] "delete"):
-- KEYS[1]  gw:{acct:ID}:proj:PROJECTID
-- KEYS[2]  gw:{acct:ID}:projects           set: the account's project ids
-- KEYS[3]  gw:{acct:ID}:pkeys:PROJECTID
-- ARGV[2]  the project's id
--
-- Returns 1 done, -1 no such key or project, -2 the project still has keys,
-- -3 the key's project changed since the caller read it (read it again).

if ARGV[1] == 'delete' then
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return -1
  end
  if redis.call('SCARD', KEYS[3]) > 0 then
    return -2
  end
  redis.call('DEL', KEYS[1])
  redis.call('SREM', KEYS[2], ARGV[2])
  return 1
end

if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
if ARGV[3] ~= '' and redis.call('EXISTS', KEYS[2]) == 0 then
  return -1
end
local cur = redis.call('HGET', KEYS[1], 'project') or ''
if cur ~= ARGV[2] then
  return -3
end
if cur ~= '' then
  redis.call('SREM', KEYS[3], ARGV[4])
end
if ARGV[3] ~= '' then
  redis.call('SADD', KEYS[4], ARGV[4])
end
redis.call('HSET', KEYS[1], 'project', ARGV[3])
return 1
