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

-- name: mem0_source
-- Which database the collection is in: the cluster's system identifier and the database's name
-- (an import records it in each memory's origin, so that a sync deletes only its own).
SELECT (SELECT system_identifier FROM pg_control_system())::text AS system,
       current_database() AS dbname

-- name: existing_memories
-- The tenant's memories (and store items) among `ids`: an import skips them before any model
-- work, a sync compares them with the collection's rows.
SELECT m.id, m.user_id, m.agent_id, m.run_id, m.text, m.metadata, m.origin, m.updated_at,
       m.namespace IS NOT NULL AS item
  FROM {schema}.memories m
 WHERE m.tenant = %(tenant)s AND m.id = ANY(%(ids)s::uuid[])

-- name: imported_ids
-- The tenant's memories that an import recorded as coming from collection `collection` of the
-- database `source` (memories.origin): a sync deletes those the collection no longer has, and
-- no other. Store items are never among them.
SELECT m.id, m.user_id, m.agent_id, m.run_id
  FROM {schema}.memories m
 WHERE m.tenant = %(tenant)s AND m.namespace IS NULL
   AND m.origin ->> 'importer' = 'mem0'
   AND m.origin ->> 'source' = %(source)s
   AND m.origin ->> 'collection' = %(collection)s
 ORDER BY m.id

-- name: set_origins
-- Record where memories came from (`origins[i]` for `ids[i]`) and, where `updated[i]` is not
-- NULL, set their updated_at to it (Mem0's). Only memories, never store items.
UPDATE {schema}.memories m
   SET origin = o.origin, updated_at = coalesce(o.updated, m.updated_at)
  FROM unnest(%(ids)s::uuid[], %(origins)s::jsonb[], %(updated)s::timestamptz[])
       AS o (id, origin, updated)
 WHERE m.tenant = %(tenant)s AND m.id = o.id AND m.namespace IS NULL
RETURNING m.id
