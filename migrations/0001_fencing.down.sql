-- 0001_fencing down: remove the Postgres fence. Every fenced resource forgets
-- its highest token, so only run it when nothing relies on the fence.
DROP FUNCTION IF EXISTS lockapi_fence_check(text, bigint);
DROP FUNCTION IF EXISTS lockapi_fence_admit(text, bigint);
DROP TABLE IF EXISTS lockapi_fence;
