-- The statements of pgmem.reembed (pgmem/reembedding.py), one named block each, as queries.sql.
-- {schema} is pgmem's schema; {vector_type} the new column's type (e.g. `halfvec(3072)`),
-- {cosine_ops} its HNSW operator class. Values are bound parameters.
--
-- How a re-embedding runs (every step can be killed; running reembed again resumes):
-- 1. `next`: the new model on record (row 'next' of embedding_models), a nullable column
--    embedding_next on memories and entities, and a trigger that empties a memory's
--    embedding_next when its text changes -- one transaction.
-- 2. copy: the rows whose embedding_next is empty, in key order and batches: embedded, and
--    written only if the memory's text is still the one embedded (content_hash), its
--    embedding_next still empty, and no write holds the row (skipped: a later pass takes it).
--    Meanwhile the application's writes store the new model's vectors of what they write, in
--    their own transactions, where they can embed with it (pgmem.next_model, queries.sql's
--    write_next_memories): those rows never become rows to do.
-- 3. indexes, built CONCURRENTLY (writes go on): a partial index of the rows still to do (found
--    at once by the catch-up and the switch), and the HNSW index of the new column.
-- 4. catch-up: rows added or changed meanwhile, through the partial index.
-- 5. switch, one short transaction: waits for pgmem's writes in flight, locks both tables,
--    embeds the last few rows, drops the old column (and its index), renames the new one and
--    its index, records the model. A NOT VALID check keeps new rows non-null.
-- 6. finish: the check validated without blocking writes, then SET NOT NULL (no scan: the
--    valid check proves it), the check dropped.

-- name: reembed_session_lock
-- One re-embedding per schema at a time, for as long as its connection lives.
SELECT pg_try_advisory_lock(hashtext('pgmem.reembed'), hashtext(%(schema)s)) AS locked

-- name: reembed_session_unlock
SELECT pg_advisory_unlock(hashtext('pgmem.reembed'), hashtext(%(schema)s))

-- name: reembed_models_table
SELECT to_regclass(%(table)s) IS NOT NULL AS found

-- name: reembed_pgvector_version
SELECT extversion FROM pg_extension WHERE extname = 'vector'

-- name: reembed_models
SELECT e.role, e.model, e.dim, e.storage FROM {schema}.embedding_models e

-- name: reembed_columns
-- Which of the re-embedding's objects exist (a killed run leaves some).
SELECT EXISTS (SELECT FROM pg_attribute a
                WHERE a.attrelid = to_regclass(%(memories)s) AND a.attname = 'embedding_next'
                  AND NOT a.attisdropped) AS memories_next,
       EXISTS (SELECT FROM pg_attribute a
                WHERE a.attrelid = to_regclass(%(entities)s) AND a.attname = 'embedding_next'
                  AND NOT a.attisdropped) AS entities_next,
       array(SELECT k.conname::text FROM pg_constraint k
              WHERE k.conrelid IN (to_regclass(%(memories)s), to_regclass(%(entities)s))
                AND k.conname IN ('memories_embedding_not_null', 'entities_embedding_not_null')
              ORDER BY 1) AS not_null_checks

-- name: reembed_invalid_indexes
-- The re-embedding's indexes that a killed CREATE INDEX CONCURRENTLY left invalid.
SELECT c.relname::text AS name
  FROM pg_index i
  JOIN pg_class c ON c.oid = i.indexrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = %(schema)s AND NOT i.indisvalid
   AND c.relname IN ('memories_reembed_todo_idx', 'entities_reembed_todo_idx',
                     'memories_embedding_next_idx')

-- name: reembed_drop_index
DROP INDEX CONCURRENTLY IF EXISTS {schema}.{index}

-- name: reembed_lock_timeout
SELECT set_config('lock_timeout', %(lock_timeout)s, true)

-- name: reembed_citus_sequential
SELECT set_config('citus.multi_shard_modify_mode', 'sequential', true)

-- name: reembed_begin
-- Step 1 (in one transaction with the next blocks): the model on record...
INSERT INTO {schema}.embedding_models (role, model, dim, storage)
VALUES ('next', %(model)s, %(dim)s, %(storage)s)

-- name: reembed_add_columns
-- ... the new columns (nullable, no default: no table rewrite) ...
ALTER TABLE {schema}.memories ADD COLUMN IF NOT EXISTS embedding_next {vector_type};
ALTER TABLE {schema}.entities ADD COLUMN IF NOT EXISTS embedding_next {vector_type}

-- name: reembed_column_storage
-- ... kept in the row, as the old columns (on one server; Citus refuses SET STORAGE on a
-- distributed table, whose shards then keep the type's default, EXTENDED) ...
ALTER TABLE {schema}.memories ALTER COLUMN embedding_next SET STORAGE MAIN;
ALTER TABLE {schema}.entities ALTER COLUMN embedding_next SET STORAGE MAIN

-- name: reembed_add_trigger
-- ... and the trigger: a memory whose text changes (an update by an application still on the
-- old model) needs its new vector made again. An entity's name never changes.
CREATE OR REPLACE FUNCTION {schema}.reembed_invalidate() RETURNS trigger
    LANGUAGE plpgsql AS $$ BEGIN NEW.embedding_next := NULL; RETURN NEW; END $$;
CREATE OR REPLACE TRIGGER memories_reembed
    BEFORE UPDATE ON {schema}.memories
    FOR EACH ROW WHEN (NEW.text IS DISTINCT FROM OLD.text)
    EXECUTE FUNCTION {schema}.reembed_invalidate()

-- name: reembed_counts
SELECT (SELECT count(*) FROM {schema}.memories m WHERE m.embedding_next IS NULL) AS memories,
       (SELECT count(*) FROM {schema}.entities e WHERE e.embedding_next IS NULL) AS entities

-- name: reembed_memories_todo
-- The next memories without a new vector, after a position in key order.
SELECT m.tenant, m.id, m.text, m.content_hash
  FROM {schema}.memories m
 WHERE m.embedding_next IS NULL
   AND (m.tenant, m.id) > (%(after_tenant)s::text, %(after_id)s::uuid)
 ORDER BY m.tenant, m.id
 LIMIT %(limit)s

-- name: reembed_entities_todo
-- Entities are embedded from their stored (normalised) name.
SELECT e.tenant, e.id, e.name AS text, e.name AS content_hash
  FROM {schema}.entities e
 WHERE e.embedding_next IS NULL
   AND (e.tenant, e.id) > (%(after_tenant)s::text, %(after_id)s::uuid)
 ORDER BY e.tenant, e.id
 LIMIT %(limit)s

-- name: reembed_memories_write
-- New vectors, each kept only if its memory still has the text that was embedded and no new
-- vector yet (an application's write may have stored one meanwhile: pgmem.next_model). A row
-- a write holds is skipped, not waited for -- left for the catch-up -- so that the copy never
-- waits for, nor deadlocks with, a write (which locks entity rows in name order, not this
-- statement's key order).
UPDATE {schema}.memories m
   SET embedding_next = v.embedding
  FROM unnest(%(tenants)s::text[], %(ids)s::uuid[], %(hashes)s::text[],
              %(embeddings)b::vector[]) AS v(tenant, id, content_hash, embedding)
 WHERE m.tenant = v.tenant AND m.id = v.id AND m.content_hash = v.content_hash
   AND (m.tenant, m.id) IN (SELECT l.tenant, l.id
                              FROM {schema}.memories l
                              JOIN unnest(%(tenants)s::text[], %(ids)s::uuid[]) AS k(tenant, id)
                                ON l.tenant = k.tenant AND l.id = k.id
                             WHERE l.embedding_next IS NULL
                               FOR UPDATE OF l SKIP LOCKED)

-- name: reembed_entities_write
UPDATE {schema}.entities e
   SET embedding_next = v.embedding
  FROM unnest(%(tenants)s::text[], %(ids)s::uuid[], %(hashes)s::text[],
              %(embeddings)b::vector[]) AS v(tenant, id, name, embedding)
 WHERE e.tenant = v.tenant AND e.id = v.id AND e.name = v.name
   AND (e.tenant, e.id) IN (SELECT l.tenant, l.id
                              FROM {schema}.entities l
                              JOIN unnest(%(tenants)s::text[], %(ids)s::uuid[]) AS k(tenant, id)
                                ON l.tenant = k.tenant AND l.id = k.id
                             WHERE l.embedding_next IS NULL
                               FOR UPDATE OF l SKIP LOCKED)

-- name: reembed_memories_write_citus
-- reembed_memories_write on Citus, which runs no row locks in a statement over many shards:
-- it waits for a row a write holds.
UPDATE {schema}.memories m
   SET embedding_next = v.embedding
  FROM unnest(%(tenants)s::text[], %(ids)s::uuid[], %(hashes)s::text[],
              %(embeddings)b::vector[]) AS v(tenant, id, content_hash, embedding)
 WHERE m.tenant = v.tenant AND m.id = v.id AND m.content_hash = v.content_hash
   AND m.embedding_next IS NULL

-- name: reembed_entities_write_citus
UPDATE {schema}.entities e
   SET embedding_next = v.embedding
  FROM unnest(%(tenants)s::text[], %(ids)s::uuid[], %(hashes)s::text[],
              %(embeddings)b::vector[]) AS v(tenant, id, name, embedding)
 WHERE e.tenant = v.tenant AND e.id = v.id AND e.name = v.name
   AND e.embedding_next IS NULL

-- name: reembed_memories_todo_index
-- Step 3: the rows still to do, once most are done: small, and kept up to date by every write.
CREATE INDEX CONCURRENTLY IF NOT EXISTS memories_reembed_todo_idx
    ON {schema}.memories (tenant, id) WHERE embedding_next IS NULL

-- name: reembed_entities_todo_index
CREATE INDEX CONCURRENTLY IF NOT EXISTS entities_reembed_todo_idx
    ON {schema}.entities (tenant, id) WHERE embedding_next IS NULL

-- name: reembed_hnsw_index
-- The new column's HNSW index, before the switch: searches use it from their first query on
-- the new model.
CREATE INDEX CONCURRENTLY IF NOT EXISTS memories_embedding_next_idx
    ON {schema}.memories USING hnsw (embedding_next {cosine_ops})

-- name: reembed_lock_tables
-- Step 5: waits for pgmem's writes in flight -- each has read embedding_models in its
-- transaction, and holds that table's ACCESS SHARE lock until it commits -- and keeps new ones
-- waiting; they then read the new model and refuse to write the old one's vectors.
LOCK TABLE {schema}.embedding_models, {schema}.memories, {schema}.entities
    IN ACCESS EXCLUSIVE MODE

-- name: reembed_swap
-- The switch itself: catalog changes only, no row is rewritten. Dropping the old column drops
-- its HNSW index; the new column takes the old names.
DROP TRIGGER memories_reembed ON {schema}.memories;
DROP FUNCTION {schema}.reembed_invalidate();
DROP INDEX {schema}.memories_reembed_todo_idx;
DROP INDEX {schema}.entities_reembed_todo_idx;
ALTER TABLE {schema}.memories DROP COLUMN embedding;
ALTER TABLE {schema}.memories RENAME COLUMN embedding_next TO embedding;
ALTER INDEX {schema}.memories_embedding_next_idx RENAME TO memories_embedding_idx;
ALTER TABLE {schema}.memories ADD CONSTRAINT memories_embedding_not_null
    CHECK (embedding IS NOT NULL) NOT VALID;
ALTER TABLE {schema}.entities DROP COLUMN embedding;
ALTER TABLE {schema}.entities RENAME COLUMN embedding_next TO embedding;
ALTER TABLE {schema}.entities ADD CONSTRAINT entities_embedding_not_null
    CHECK (embedding IS NOT NULL) NOT VALID;
UPDATE {schema}.embedding_models c
   SET model = n.model, dim = n.dim, storage = n.storage, updated_at = now()
  FROM {schema}.embedding_models n
 WHERE c.role = 'current' AND n.role = 'next';
DELETE FROM {schema}.embedding_models WHERE role = 'next'

-- name: reembed_validate
-- Step 6: scans the table holding a lock that lets reads and writes go on.
ALTER TABLE {schema}.{table} VALIDATE CONSTRAINT {check}

-- name: reembed_set_not_null
-- A valid CHECK (embedding IS NOT NULL) spares SET NOT NULL its scan: a short lock.
ALTER TABLE {schema}.{table} ALTER COLUMN embedding SET NOT NULL;
ALTER TABLE {schema}.{table} DROP CONSTRAINT {check}

-- name: reembed_analyze
-- The planner's statistics of the new columns.
ANALYZE {schema}.memories, {schema}.entities

-- name: reembed_abort
-- Undo steps 1-4 (the old column was never touched). IF EXISTS: a killed step 1 leaves nothing.
-- First waits for pgmem's writes in flight, as the switch does: one that read the next model on
-- record may still store its vector in the new column.
LOCK TABLE {schema}.embedding_models IN ACCESS EXCLUSIVE MODE;
DROP TRIGGER IF EXISTS memories_reembed ON {schema}.memories;
DROP FUNCTION IF EXISTS {schema}.reembed_invalidate();
DROP INDEX IF EXISTS {schema}.memories_reembed_todo_idx;
DROP INDEX IF EXISTS {schema}.entities_reembed_todo_idx;
DROP INDEX IF EXISTS {schema}.memories_embedding_next_idx;
ALTER TABLE {schema}.memories DROP COLUMN IF EXISTS embedding_next;
ALTER TABLE {schema}.entities DROP COLUMN IF EXISTS embedding_next;
DELETE FROM {schema}.embedding_models WHERE role = 'next'
