-- 0001_fencing: the Postgres fence a downstream resource keeps so that a
-- paused old lock holder can't overwrite a newer holder's work.
--
-- A lockapi fencing token rises with every fresh grant of a lock. A resource
-- remembers the highest token it has admitted and refuses lower ones; equal
-- tokens pass, because one lease makes many writes with one token. Tokens
-- are below 2^53, so bigint holds them exactly.

CREATE TABLE lockapi_fence (
	-- The name of what is protected, usually the lock name.
	resource   text PRIMARY KEY,
	-- The highest token admitted so far.
	token      bigint NOT NULL CHECK (token >= 0),
	-- When token last rose.
	updated_at timestamptz NOT NULL DEFAULT now()
);

-- lockapi_fence_admit admits p_token for p_resource if no higher token has
-- been admitted, and returns true; it returns false for a stale token and
-- leaves the caller to decide (roll back, report, retry with a new lease).
--
-- Call it inside the transaction that makes the protected writes, BEFORE
-- those writes, and have every writer of the resource call it. The row lock
-- it takes is what makes that safe:
--
--   SELECT ... FOR UPDATE locks the resource's fence row until the CALLER's
--   transaction commits or rolls back, not just until this function returns.
--   So two transactions fencing the same resource run their
--   "admit; write; commit" sections one after the other, never interleaved.
--
--   * Stale first (token 41 locks the row): 41 is admitted, writes and
--     commits; only then does 42 get the lock, read 41, admit 42 and write.
--     42's writes land after 41's: the right order.
--   * Fresh first (token 42 locks the row and stores 42): 41 waits on the
--     lock. If 42 commits, 41 then reads 42 and is refused, so it can't
--     commit writes on top of 42's. If 42 rolls back, the stored token goes
--     back with it and admitting 41 is right: 42's work never happened.
--
--   Either way the stale transaction commits before the fresh one is
--   admitted, or not at all (unless the fresh one rolls back, which undoes
--   its admission too). Without the lock both could read the old token, both
--   be admitted, and 41 could commit last and overwrite 42's data.
--
-- Under READ COMMITTED, FOR UPDATE waits for the holder and then reads the
-- newest committed token. Under REPEATABLE READ or SERIALIZABLE, a fence row
-- changed by a transaction that committed after the caller's snapshot makes
-- this function fail with a serialization error (SQLSTATE 40001) instead:
-- also safe, and the caller retries the whole transaction.
CREATE FUNCTION lockapi_fence_admit(p_resource text, p_token bigint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
	v_highest bigint;
BEGIN
	IF p_resource IS NULL OR p_token IS NULL OR p_token < 0 THEN
		RAISE EXCEPTION 'lockapi_fence_admit: resource must not be null and token must be a non-negative integer (got %, %)',
			p_resource, p_token
			USING ERRCODE = '22023'; -- invalid_parameter_value
	END IF;

	-- Make sure the row exists so there is something to lock. If another
	-- transaction inserted it and has not committed, this waits for it.
	INSERT INTO lockapi_fence (resource, token)
	VALUES (p_resource, p_token)
	ON CONFLICT (resource) DO NOTHING;

	-- The row lock: held until the caller's transaction ends. See above.
	SELECT token INTO v_highest
	FROM lockapi_fence
	WHERE resource = p_resource
	FOR UPDATE;

	IF p_token < v_highest THEN
		RETURN false;
	END IF;
	IF p_token > v_highest THEN
		UPDATE lockapi_fence
		SET token = p_token, updated_at = now()
		WHERE resource = p_resource;
	END IF;
	RETURN true;
END;
$$;

COMMENT ON FUNCTION lockapi_fence_admit(text, bigint) IS
	'Admit p_token for p_resource if it is not lower than the highest admitted; row-locks the fence until the caller''s transaction ends. Returns false for a stale token.';

-- lockapi_fence_check is lockapi_fence_admit for callers who want a stale
-- token to fail their transaction: it raises SQLSTATE LA001 instead of
-- returning false. Any later statement in that transaction then fails too,
-- so the stale writer can't commit anything.
CREATE FUNCTION lockapi_fence_check(p_resource text, p_token bigint)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
	IF NOT lockapi_fence_admit(p_resource, p_token) THEN
		RAISE EXCEPTION 'lockapi fence: stale token % for resource %: a higher token was already admitted',
			p_token, p_resource
			USING ERRCODE = 'LA001',
			      HINT = 'The lock was granted again since this token was issued; acquire the lock anew.';
	END IF;
END;
$$;

COMMENT ON FUNCTION lockapi_fence_check(text, bigint) IS
	'Like lockapi_fence_admit, but raises SQLSTATE LA001 for a stale token.';
