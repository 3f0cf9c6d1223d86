-- The statements of store items (pgmem.items, behind pgmem.langgraph's PgmemStore), one named
-- block each, beside queries.sql's (whose insert_memories, delete_memories and search they
-- share). An item is a memory with a namespace and a key instead of scope ids; its value is the
-- memory's metadata. {scope} is queries.sql's scope block with a namespace scope
-- (scope_namespace or scope_any_namespace) and the item filter.

-- name: lock_items
-- The lock of each (namespace, key) a put or delete writes, held until the transaction ends,
-- taken through take_locks (sql/schema.sql) before anything else: concurrent puts of one key
-- serialise (the unique index would otherwise fail the second), and cannot deadlock. The keys
-- hold the tenant's secret salt, as lock_contents' do; at most 256 locks, whatever the batch.
SELECT {schema}.take_locks(
           %(tenant)s::text,
           (SELECT s.lock_salt FROM {schema}.tenant_secrets s WHERE s.tenant = %(tenant)s::text),
           'item',
           ARRAY(SELECT jsonb_build_array(i.namespace, i.key)::text
                   FROM unnest(%(namespaces)s::jsonb[], %(keys)s::text[]) AS i(namespace, key)))

-- name: existing_items
-- The memories standing for these (namespace, key) pairs, locked; with the ordinal of the pair.
SELECT i.ord, m.id, m.created_at, now() AS now
  FROM unnest(%(namespaces)s::jsonb[], %(keys)s::text[]) WITH ORDINALITY AS i(namespace, key, ord)
  JOIN {schema}.memories m
    ON m.tenant = %(tenant)s AND m.namespace IS NOT NULL
   AND m.namespace = ARRAY(SELECT jsonb_array_elements_text(i.namespace))
   AND m.key = i.key
 ORDER BY m.id
   FOR UPDATE OF m

-- name: get_items
-- Items by (namespace, key), each with the ordinal of its request; the time to live of those
-- asked with `refresh` starts again. With `omit_expired`, an expired item is not found.
WITH wanted AS (
    SELECT ARRAY(SELECT jsonb_array_elements_text(i.namespace)) AS namespace, i.key, i.refresh,
           i.ord
      FROM unnest(%(namespaces)s::jsonb[], %(keys)s::text[], %(refresh)s::boolean[])
           WITH ORDINALITY AS i(namespace, key, refresh, ord)
),
found AS (
    SELECT w.ord, w.refresh, m.id, m.namespace, m.key, m.metadata, m.created_at, m.updated_at,
           m.ttl_minutes
      FROM wanted w
      JOIN {schema}.memories m
        ON m.tenant = %(tenant)s AND m.namespace IS NOT NULL AND m.namespace = w.namespace
       AND m.key = w.key
     WHERE NOT %(omit_expired)s::boolean OR m.expires_at IS NULL OR m.expires_at > now()
),
refreshed AS (
    UPDATE {schema}.memories m
       SET expires_at = now() + m.ttl_minutes * interval '1 minute'
      FROM found f
     WHERE f.refresh AND f.ttl_minutes IS NOT NULL AND m.tenant = %(tenant)s AND m.id = f.id
)
SELECT f.ord, f.namespace, f.key, f.metadata AS value, f.created_at, f.updated_at FROM found f

-- name: refresh_items
-- The time to live of the items a search found (by id) starts again.
UPDATE {schema}.memories m
   SET expires_at = now() + m.ttl_minutes * interval '1 minute'
 WHERE m.tenant = %(tenant)s AND m.id = ANY(%(ids)s::uuid[]) AND m.namespace IS NOT NULL
   AND m.ttl_minutes IS NOT NULL

-- name: list_items
-- A page of the items under a namespace prefix that match the filter, most recently updated
-- first (as LangGraph's PostgresStore lists them), ties in namespace and key order; their time
-- to live starts again with `refresh`.
WITH page AS (
    SELECT m.id, m.namespace, m.key, m.metadata, m.created_at, m.updated_at, m.ttl_minutes
      FROM {schema}.memories m
     WHERE {scope}
     ORDER BY m.updated_at DESC, m.namespace, m.key
     LIMIT %(limit)s OFFSET %(offset)s
),
refreshed AS (
    UPDATE {schema}.memories m
       SET expires_at = now() + p.ttl_minutes * interval '1 minute'
      FROM page p
     WHERE %(refresh)s::boolean AND p.ttl_minutes IS NOT NULL
       AND m.tenant = %(tenant)s AND m.id = p.id
)
SELECT p.namespace, p.key, p.metadata AS value, p.created_at, p.updated_at
  FROM page p
 ORDER BY p.updated_at DESC, p.namespace, p.key

-- name: list_namespaces
-- The distinct namespaces of the tenant's items, cut to `max_depth` labels (NULL: whole), that
-- start with `prefix` and end with `suffix` (NULL labels: "*", any label; NULL arrays: no
-- condition), in byte order. The prefix's labels before its first wildcard
-- (`fixed_from`, `fixed_end`, as scope_namespace's range; NULL when there are none) make an
-- index range.
SELECT DISTINCT CASE WHEN %(max_depth)s::int IS NULL THEN m.namespace
                     ELSE m.namespace[1:%(max_depth)s::int] END AS namespace
  FROM {schema}.memories m
 WHERE m.tenant = %(tenant)s AND m.namespace IS NOT NULL
   AND (%(fixed_from)s::text[] IS NULL
        OR (m.namespace >= %(fixed_from)s::text[] AND m.namespace < %(fixed_end)s::text[]))
   AND (%(prefix)s::text[] IS NULL
        OR (cardinality(m.namespace) >= cardinality(%(prefix)s::text[])
            AND NOT EXISTS (SELECT FROM unnest(%(prefix)s::text[]) WITH ORDINALITY p(label, n)
                             WHERE p.label IS NOT NULL AND m.namespace[p.n::int] <> p.label)))
   AND (%(suffix)s::text[] IS NULL
        OR (cardinality(m.namespace) >= cardinality(%(suffix)s::text[])
            AND NOT EXISTS (SELECT FROM unnest(%(suffix)s::text[]) WITH ORDINALITY s(label, n)
                             WHERE s.label IS NOT NULL
                               AND m.namespace[cardinality(m.namespace)
                                               - cardinality(%(suffix)s::text[]) + s.n::int]
                                   <> s.label)))
   AND (NOT %(omit_expired)s::boolean OR m.expires_at IS NULL OR m.expires_at > now())
 ORDER BY 1
 LIMIT %(limit)s OFFSET %(offset)s

-- name: lock_expired_items
-- The ids of the tenant's items whose time to live has passed, locked (skipping those another
-- transaction holds: a put rewriting one), in id order, at most `limit`.
SELECT m.id
  FROM {schema}.memories m
 WHERE m.tenant = %(tenant)s AND m.expires_at IS NOT NULL AND m.expires_at <= now()
 ORDER BY m.id
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED

-- name: lock_items_citus
-- On Citus: lock_items' locks on the tenant's worker, one per key (see lock_contents_citus).
-- The lock of each (namespace, key) a put or delete writes, held until the transaction ends,
-- taken in one pass in key order before anything else: concurrent puts of one key serialise
-- (the unique index would otherwise fail the second), and cannot deadlock. Each key holds the
-- tenant's secret salt, as lock_contents' do.
WITH salt AS MATERIALIZED (
    SELECT (SELECT s.lock_salt FROM {schema}.tenant_secrets s
             WHERE s.tenant = %(tenant)s::text) AS salt
)
SELECT pg_advisory_xact_lock(hashtext('pgmem.item'), k.key)
  FROM (SELECT DISTINCT hashtext(jsonb_build_array(%(tenant)s::text, x.salt, i.namespace,
                                                   i.key)::text) AS key
          FROM unnest(%(namespaces)s::jsonb[], %(keys)s::text[]) AS i(namespace, key)
         CROSS JOIN salt x) k
 ORDER BY k.key
