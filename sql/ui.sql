-- The reads of the memory inspector (pgmem.ui): what the public API does not answer. Every
-- statement names one tenant, and each read is bounded -- a page, a capped count, one scope --
-- so that a page stays quick on a table of millions of memories. {column} is one scope id
-- column (user_id, agent_id or run_id), an identifier pgmem.ui.data picks from a fixed list.

-- name: tenant_summary
-- The tenant's memories and entities, each counted up to %(cap)s (an index range each).
SELECT (SELECT count(*) FROM (SELECT 1 FROM {schema}.memories AS m
                               WHERE m.tenant = %(tenant)s::text LIMIT %(cap)s::int) AS c
       ) AS memories,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.entities AS e
                               WHERE e.tenant = %(tenant)s::text LIMIT %(cap)s::int) AS c
       ) AS entities

-- name: scopes_after
-- One page of the tenant's scope ids of {column} after %(after)s ({bound}: that comparison, or
-- TRUE from the first; an OR of the two kept the planner from the index range), in order: a skip scan of the scope id's index (one probe a scope, never a pass over the
-- memories), then per scope its memories (counted up to %(cap)s), its latest memory (the
-- index's last entry) and the entities its links reach (links counted up to %(cap)s).
WITH RECURSIVE ids (id) AS (
    (SELECT m.{column} FROM {schema}.memories AS m
      WHERE m.tenant = %(tenant)s::text AND m.{column} IS NOT NULL
        AND {bound}
      ORDER BY m.{column} LIMIT 1)
    UNION ALL
    SELECT (SELECT m.{column} FROM {schema}.memories AS m
             WHERE m.tenant = %(tenant)s::text AND m.{column} > ids.id
             ORDER BY m.{column} LIMIT 1)
      FROM ids WHERE ids.id IS NOT NULL
)
SELECT page.id AS scope_id, {scope_counts}
  FROM (SELECT id FROM ids WHERE id IS NOT NULL LIMIT %(page)s::int) AS page
 ORDER BY page.id

-- name: scopes_before
-- The same page before %(before)s ({bound} as above; TRUE: from the last), read backwards, returned in order.
WITH RECURSIVE ids (id) AS (
    (SELECT m.{column} FROM {schema}.memories AS m
      WHERE m.tenant = %(tenant)s::text AND m.{column} IS NOT NULL
        AND {bound}
      ORDER BY m.{column} DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT m.{column} FROM {schema}.memories AS m
             WHERE m.tenant = %(tenant)s::text AND m.{column} < ids.id
             ORDER BY m.{column} DESC LIMIT 1)
      FROM ids WHERE ids.id IS NOT NULL
)
SELECT page.id AS scope_id, {scope_counts}
  FROM (SELECT id FROM ids WHERE id IS NOT NULL LIMIT %(page)s::int) AS page
 ORDER BY page.id DESC

-- name: scope_summary
-- One scope's counts, as a page of scopes_after shows them.
SELECT page.id AS scope_id, {scope_counts}
  FROM (SELECT %(scope_id)s::text AS id) AS page

-- name: scope_counts
(SELECT count(*) FROM (SELECT 1 FROM {schema}.memories AS m
                        WHERE m.tenant = %(tenant)s::text AND m.{column} = page.id
                        LIMIT %(cap)s::int) AS c) AS memories,
(SELECT max(m.created_at) FROM {schema}.memories AS m
  WHERE m.tenant = %(tenant)s::text AND m.{column} = page.id) AS last_added,
(SELECT count(DISTINCT l.entity_id)
   FROM (SELECT me.entity_id FROM {schema}.memory_entities AS me
          WHERE me.tenant = %(tenant)s::text AND me.{column} = page.id
          LIMIT %(cap)s::int) AS l) AS entities

-- name: memory_extras
-- For the memories of a page: their entities (name, label) and expiry.
SELECT m.id, m.expires_at, m.ts_config,
       coalesce(jsonb_agg(jsonb_build_object('name', e.name, 'label', e.label)
                          ORDER BY e.name) FILTER (WHERE e.id IS NOT NULL), '[]') AS entities
  FROM {schema}.memories AS m
  LEFT JOIN {schema}.memory_entities AS me ON me.tenant = m.tenant AND me.memory_id = m.id
  LEFT JOIN {schema}.entities AS e ON e.tenant = me.tenant AND e.id = me.entity_id
 WHERE m.tenant = %(tenant)s::text AND m.id = ANY(%(ids)s::uuid[])
 GROUP BY m.id, m.expires_at, m.ts_config

-- name: memory_entities
-- A memory's entities, each with how many memories of the tenant link to it (up to %(cap)s)
-- and up to %(others)s of those others, latest first.
SELECT e.name, e.label,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.memory_entities AS l
                               WHERE l.tenant = e.tenant AND l.entity_id = e.id
                               LIMIT %(cap)s::int) AS c) AS links,
       coalesce((SELECT jsonb_agg(jsonb_build_object('id', o.id, 'text', o.text)
                                  ORDER BY o.created_at DESC, o.id)
                   FROM (SELECT o.id, o.text, o.created_at
                           FROM {schema}.memory_entities AS l
                           JOIN {schema}.memories AS o ON o.tenant = l.tenant AND o.id = l.memory_id
                          WHERE l.tenant = e.tenant AND l.entity_id = e.id
                            AND l.memory_id <> %(id)s::uuid
                          ORDER BY o.created_at DESC, o.id LIMIT %(others)s::int) AS o),
                '[]') AS others
  FROM {schema}.memory_entities AS me
  JOIN {schema}.entities AS e ON e.tenant = me.tenant AND e.id = me.entity_id
 WHERE me.tenant = %(tenant)s::text AND me.memory_id = %(id)s::uuid
 ORDER BY e.name

-- name: neighbours
-- For memories of the scope {column} = %(scope_id)s: the ids of the two stored just before and
-- just after each, in the scope's (created_at, id) order -- the order of get_all and of the
-- search's neighbour step. Two index probes a memory.
SELECT m.id, m.text, m.created_at,
       ARRAY(SELECT o.id FROM {schema}.memories AS o
              WHERE o.tenant = m.tenant AND o.{column} = m.{column}
                AND (o.created_at, o.id) < (m.created_at, m.id)
              ORDER BY o.created_at DESC, o.id DESC LIMIT 2) AS before,
       ARRAY(SELECT o.id FROM {schema}.memories AS o
              WHERE o.tenant = m.tenant AND o.{column} = m.{column}
                AND (o.created_at, o.id) > (m.created_at, m.id)
              ORDER BY o.created_at, o.id LIMIT 2) AS after
  FROM {schema}.memories AS m
 WHERE m.tenant = %(tenant)s::text AND m.{column} = %(scope_id)s::text
   AND m.id = ANY(%(ids)s::uuid[])

-- name: texts
-- The texts of some memories of the tenant, by id.
SELECT m.id, m.text, m.created_at
  FROM {schema}.memories AS m
 WHERE m.tenant = %(tenant)s::text AND m.id = ANY(%(ids)s::uuid[])

-- name: timeline
-- How many memories the scope gained in each of %(bins)s equal spans of time from its first
-- memory to its last (bins 1..%(bins)s), with those two times.
WITH bounds AS (
    SELECT min(m.created_at) AS first, max(m.created_at) AS last
      FROM {schema}.memories AS m
     WHERE m.tenant = %(tenant)s::text AND m.{column} = %(scope_id)s::text
)
SELECT b.first, b.last,
       least(width_bucket(extract(epoch FROM m.created_at)::float8,
                          extract(epoch FROM b.first)::float8,
                          extract(epoch FROM b.last)::float8 + 1e-6, %(bins)s::int),
             %(bins)s::int) AS bin,
       count(*) AS memories
  FROM {schema}.memories AS m CROSS JOIN bounds AS b
 WHERE m.tenant = %(tenant)s::text AND m.{column} = %(scope_id)s::text
 GROUP BY b.first, b.last, bin
 ORDER BY bin

-- name: fanout
-- The scope's entities by how many of its memories each links to (its spread in a search of
-- the scope): for each spread, how many entities have it, and the names of up to three.
SELECT s.links, count(*) AS entities,
       (array_agg(e.name ORDER BY e.name))[1:3] AS examples
  FROM (SELECT me.entity_id, count(*) AS links
          FROM {schema}.memory_entities AS me
         WHERE me.tenant = %(tenant)s::text AND me.{column} = %(scope_id)s::text
         GROUP BY me.entity_id) AS s
  JOIN {schema}.entities AS e ON e.tenant = %(tenant)s::text AND e.id = s.entity_id
 GROUP BY s.links
 ORDER BY s.links
