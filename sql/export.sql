-- pgmem export (pgmem.exporting): a tenant's or a scope's memories, read in one snapshot (a
-- read-only REPEATABLE READ transaction) through a server-side cursor. Blocks of this file
-- are composed with those of queries.sql: {scope} is its `scope` block. Store items
-- (pgmem.langgraph, `namespace` set) are not memories of a scope and are never exported.

-- name: export_head
-- What the file's first line says, read first in the export's snapshot: how many memories
-- follow, and the model, dimension and storage of their vectors.
SELECT (SELECT count(*) FROM {schema}.memories m WHERE {scope} AND m.namespace IS NULL)::bigint
           AS memories,
       e.model, e.dim, e.storage
  FROM {schema}.embedding_models e
 WHERE e.role = 'current'

-- name: export_columns
-- A memory's columns as an export writes them; its vector only with %(vectors)s, as pgvector's
-- text (a JSON array of each float32's shortest exact decimal, made here in C: the client
-- writes it as it comes), its history (four parallel arrays, in the order the events were
-- written) only with %(history)s.
m.id, m.user_id, m.agent_id, m.run_id, m.text, m.metadata, m.created_at, m.updated_at,
       m.ts_config, m.expires_at, m.origin,
       CASE WHEN %(vectors)s::boolean THEN m.embedding::vector::text END AS embedding,
       h.events, h.old_texts, h.new_texts, h.event_times
  FROM {schema}.memories m
  LEFT JOIN LATERAL (
        SELECT array_agg(h.event ORDER BY h.id) AS events,
               array_agg(h.old_text ORDER BY h.id) AS old_texts,
               array_agg(h.new_text ORDER BY h.id) AS new_texts,
               array_agg(h.created_at ORDER BY h.id) AS event_times
          FROM {schema}.history h
         WHERE %(history)s::boolean AND h.tenant = %(tenant)s AND h.memory_id = m.id) h ON TRUE

-- name: export_scope
-- The memories of a scope, in the order they were stored: one range of the scope id's index
-- (tenant, <id>, created_at, id), no sort.
SELECT {export_columns}
 WHERE {scope} AND m.namespace IS NULL
 ORDER BY m.created_at, m.id

-- name: export_tenant
-- Every memory of the tenant, by id: one range of the primary key, no sort of the tenant.
SELECT {export_columns}
 WHERE {scope} AND m.namespace IS NULL
 ORDER BY m.id

-- name: export_deleted_history
-- With a whole tenant's history: the events of the memories deleted before the export (no
-- memory of the tenant has their id), one row per memory, by id -- one range of history's
-- index (tenant, memory_id, id), no sort.
SELECT h.memory_id AS id,
       array_agg(h.event ORDER BY h.id) AS events,
       array_agg(h.old_text ORDER BY h.id) AS old_texts,
       array_agg(h.new_text ORDER BY h.id) AS new_texts,
       array_agg(h.created_at ORDER BY h.id) AS event_times
  FROM {schema}.history h
 WHERE h.tenant = %(tenant)s
   AND NOT EXISTS (SELECT FROM {schema}.memories m
                    WHERE m.tenant = %(tenant)s AND m.id = h.memory_id)
 GROUP BY h.memory_id
 ORDER BY h.memory_id
