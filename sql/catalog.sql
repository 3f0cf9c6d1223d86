-- The command line's read-only catalogue statements (stats, doctor), one named block each
-- (`-- name: <name>`), loaded once by pgmem/cli/catalog.py the way pgmem/queries.py loads
-- queries.sql. {schema} is pgmem's schema (an identifier); values are bound parameters.

-- name: stats_counts
-- Memories, entities and links per tenant.
SELECT t.tenant, sum(t.memories)::int AS memories, sum(t.entities)::int AS entities,
       sum(t.links)::int AS links
  FROM (SELECT tenant, count(*) AS memories, 0 AS entities, 0 AS links
          FROM {schema}.memories GROUP BY tenant
        UNION ALL SELECT tenant, 0, count(*), 0 FROM {schema}.entities GROUP BY tenant
        UNION ALL SELECT tenant, 0, 0, count(*) FROM {schema}.memory_entities GROUP BY tenant) t
 GROUP BY t.tenant ORDER BY t.tenant

-- name: stats_scopes
-- The largest scopes of one tenant.
SELECT user_id, agent_id, run_id, count(*)::int AS memories
  FROM {schema}.memories WHERE tenant = %(tenant)s::text
 GROUP BY user_id, agent_id, run_id ORDER BY count(*) DESC, 1, 2, 3 LIMIT %(limit)s::int

-- name: relations
-- pgmem's tables and indexes: access method, definition, size (with indexes, for a table).
SELECT c.relname AS name, c.relkind AS kind, t.relname AS "table", am.amname AS method,
       pg_get_indexdef(c.oid) AS definition, pg_relation_size(c.oid) AS size,
       CASE WHEN c.relkind = 'r' THEN pg_total_relation_size(c.oid) END AS total_size
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_index i ON i.indexrelid = c.oid
  LEFT JOIN pg_class t ON t.oid = i.indrelid
  LEFT JOIN pg_am am ON am.oid = c.relam AND c.relkind = 'i'
 WHERE n.nspname = %(schema)s::text AND c.relkind IN ('r', 'i')
 ORDER BY coalesce(t.relname, c.relname), c.relkind DESC, c.relname

-- name: relations_citus
-- relations on a Citus coordinator: a distributed or reference table's sizes, and its indexes',
-- are the sums over its shards (the coordinator's own table is empty).
SELECT c.relname AS name, c.relkind AS kind, t.relname AS "table", am.amname AS method,
       pg_get_indexdef(c.oid) AS definition,
       CASE WHEN d.logicalrelid IS NULL THEN pg_relation_size(c.oid)
            ELSE citus_relation_size(c.oid) END AS size,
       CASE WHEN c.relkind = 'r' AND d.logicalrelid IS NULL THEN pg_total_relation_size(c.oid)
            WHEN c.relkind = 'r' THEN citus_total_relation_size(c.oid) END AS total_size
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_index i ON i.indexrelid = c.oid
  LEFT JOIN pg_class t ON t.oid = i.indrelid
  LEFT JOIN pg_am am ON am.oid = c.relam AND c.relkind = 'i'
  LEFT JOIN pg_dist_partition d ON d.logicalrelid = coalesce(t.oid, c.oid)
 WHERE n.nspname = %(schema)s::text AND c.relkind IN ('r', 'i')
 ORDER BY coalesce(t.relname, c.relname), c.relkind DESC, c.relname

-- name: citus_placement
-- On a Citus coordinator: how many of pgmem's tables Citus distributes (by tenant) or copies
-- (reference), and the workers that hold shards.
SELECT count(*) FILTER (WHERE p.partmethod = 'h')::int AS distributed,
       count(*) FILTER (WHERE p.partmethod = 'n')::int AS reference,
       (SELECT count(*)::int FROM pg_dist_node
         WHERE noderole = 'primary' AND isactive AND shouldhaveshards) AS workers
  FROM pg_dist_partition p
  JOIN pg_class c ON c.oid = p.logicalrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = %(schema)s::text

-- name: has_citus
SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') AS citus

-- name: server_versions
-- The server's version, and pgvector's: created in this database, and available to create.
SELECT current_setting('server_version') AS version,
       (SELECT extversion FROM pg_extension WHERE extname = 'vector') AS installed,
       (SELECT default_version FROM pg_available_extensions WHERE name = 'vector') AS available

-- name: count_memories
SELECT count(*)::int AS n FROM {schema}.memories
