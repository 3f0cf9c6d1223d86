-- Statements of pgmem's Mem0 doors: pgmem.compat.mem0 (reset) and pgmem.importers.mem0 (reading
-- a collection that Mem0's pgvector store wrote: a table of id uuid, vector vector(n) and
-- payload jsonb). `{collection}` is the collection's table, composed in as an identifier.

-- name: reset_tenant
-- Mem0's reset(): every memory of the tenant, its entities and history. The links go with
-- their memories and entities (ON DELETE CASCADE).
WITH memory AS (
    DELETE FROM {schema}.memories WHERE tenant = %(tenant)s RETURNING id
), entity AS (
    DELETE FROM {schema}.entities WHERE tenant = %(tenant)s RETURNING id
), event AS (
    DELETE FROM {schema}.history WHERE tenant = %(tenant)s RETURNING id
)
SELECT (SELECT count(*) FROM memory) AS memories

-- name: mem0_collection
-- The collection's row count and the dimension of its vector column (NULL without one).
SELECT (SELECT count(*) FROM {collection}) AS count,
       (SELECT a.atttypmod FROM pg_attribute a
         WHERE a.attrelid = %(table)s::regclass AND a.attname = 'vector'
           AND NOT a.attisdropped AND a.atttypid = 'vector'::regtype) AS dim

-- name: mem0_page
-- One page of the collection in id order, after `after` (keyset paging); the vectors only when
-- asked for.
SELECT c.id, CASE WHEN %(vectors)s::boolean THEN c.vector END AS vector, c.payload
  FROM {collection} c
 WHERE %(after)s::uuid IS NULL OR c.id > %(after)s::uuid
 ORDER BY c.id
 LIMIT %(limit)s

-- name: mem0_sample
-- The first rows of the collection that hold a text: to tell whether its vectors are the
-- embedder's.
SELECT c.vector, coalesce(c.payload ->> 'data', c.payload ->> 'text') AS text
  FROM {collection} c
 WHERE coalesce(c.payload ->> 'data', c.payload ->> 'text') IS NOT NULL AND c.vector IS NOT NULL
 ORDER BY c.id
 LIMIT %(limit)s

-- name: existing_memories
-- The tenant's memories among `ids`: an import skips them before any model work, a sync
-- compares them with the collection's rows.
SELECT m.id, m.user_id, m.agent_id, m.run_id, m.text, m.metadata
  FROM {schema}.memories m
 WHERE m.tenant = %(tenant)s AND m.id = ANY(%(ids)s::uuid[])

-- name: imported_ids
-- The tenant's memories imported from collection `source` (pgmem.importers.mem0.IMPORT_KEY):
-- a sync deletes those the collection no longer has, and no other.
SELECT m.id, m.user_id, m.agent_id, m.run_id
  FROM {schema}.memories m
 WHERE m.tenant = %(tenant)s AND m.metadata -> '_mem0_import' ->> 'collection' = %(source)s
