-- pgmem's statements, one named block each (`-- name: <name>`), loaded once by pgmem/queries.py.
-- {schema} is pgmem's schema (an identifier), {scope} the scope-and-filter condition on the
-- memory alias `m` (the block `scope` below with the given ids and the compiled metadata
-- filter), {scope_ids} its scope id comparisons alone (on alias `m` too). Any other placeholder
-- naming a block is a fragment: that block's text in its place (see the search block). Every
-- value is a bound, cast parameter.

-- name: scope
-- The rows a call may see: one tenant, the scope ids the call gives ({scope_ids}: the blocks
-- below of the ids given), the metadata filter. Only the ids given are compared, so that a
-- prepared statement's generic plan reads the index of each one.
m.tenant = %(tenant)s {scope_ids} AND {filters}

-- name: scope_user_id
AND m.user_id = %(user_id)s::text

-- name: scope_agent_id
AND m.agent_id = %(agent_id)s::text

-- name: scope_run_id
AND m.run_id = %(run_id)s::text

-- name: scope_namespace
-- The store items (pgmem.langgraph) under a namespace prefix of one label or more: one range of
-- arrays in byte order, from the prefix up to the prefix with its last label followed by
-- U+0001, which no longer label of the prefix's namespaces reaches (labels hold no NUL).
AND m.namespace >= %(namespace)s::text[] AND m.namespace < %(namespace_end)s::text[]

-- name: scope_any_namespace
-- Every store item (the empty namespace prefix).
AND m.namespace IS NOT NULL

-- name: scope_user_id_any
-- A wildcard id (pgmem.validate.ANY): any value, but one.
AND m.user_id IS NOT NULL

-- name: scope_agent_id_any
AND m.agent_id IS NOT NULL

-- name: scope_run_id_any
AND m.run_id IS NOT NULL

-- name: search
-- Steps 2-7 of the pipeline (docs/architecture.md) in one statement: every candidate of the
-- three legs with its exact cosine similarity, keyword scores and entity hits. Python fuses
-- (pgmem.builders.fuse_rows). The CTEs, in order:
--
--   query_terms                  the query's keyword terms
--   scope_size, scope_rows       the scope's size and, for a small scope, its rows, read once
--   semantic                     the semantic leg
--   scope_stats .. keyword       the keyword leg (BM25 or ts_rank_cd)
--   scope_links .. entity        the entity leg
--   leg_best .. neighbour_ids    the neighbour step: the memories stored beside the best hits
--   others, candidates           the union of it all, with each candidate's columns
--
-- A small and a large scope. A scope of up to %(scan_rows)s memories is read row by row, once
-- (scope_rows); a larger one through the HNSW and GIN indexes. This block is written for a
-- small scope; each {large_scope_<cte>} is the block of that name below, the large scope's path
-- of CTE <cte>. pgmem composes two statements of it (pgmem/queries.py): `search`, with those
-- blocks, whose scope_size picks a path at run time, and `search_small`, without them: its plan
-- is a third smaller (faster for a small scope: docs/benchmarks.md), and for a larger scope
-- it returns only the scope's size, after which pgmem sends `search` (pgmem.scope_sizes).
--
-- Both run as prepared statements with a generic plan (without JIT), made once per connection:
-- planning a statement of this size costs more than running it. So no plan choice may hang on
-- a value: where the best path depends on the scope's size, both paths are in the plan.
WITH
-- The query's keyword terms (pgmem.languages): the lexemes Python made (%(lexemes)s, with their
-- OR query %(tsquery)s), or, where PostgreSQL makes the lexemes of the text search
-- configuration (%(lexemes)s NULL), those of to_tsvector(%(ts_config)s, %(keyword_text)s), ORed.
-- A NULL tsquery: no keyword terms. Memories match only in the query's configuration.
query_terms AS MATERIALIZED (
    SELECT t.lexemes,
           coalesce(%(tsquery)s::tsquery,
                    nullif(array_to_string(ARRAY(
                        SELECT '''' || replace(replace(l, '\', '\\'), '''', '''''') || ''''
                          FROM unnest(t.lexemes) l), ' | '), '')::tsquery) AS tsquery
      FROM (SELECT coalesce(%(lexemes)s::text[],
                            tsvector_to_array(to_tsvector(%(ts_config)s::regconfig,
                                                          %(keyword_text)s::text))) AS lexemes) t
),
-- The scope's size, counted up to %(scan_rows)s + 1 (on the index of a scope id). A scope of up
-- to %(scan_rows)s memories is read once, row by row (scope_rows, with each row's neighbours in
-- the scope's (created_at, id) order): exact, and faster than an index walk over a table where
-- it is a small fraction. A larger one is searched through the HNSW and GIN indexes (the
-- large_scope_* blocks), its conditions wrapped in IS TRUE, which no btree index matches, so
-- that the plan cannot read the scope by a scope id instead. Those legs name the tenant once
-- more, compared under COLLATE "C" (the same equality; no btree index matches it either): the
-- condition by which Citus routes the statement to the one shard of the tenant.
scope_size AS MATERIALIZED (
    SELECT count(*) AS n
      FROM (SELECT FROM {schema}.memories m WHERE {scope} LIMIT %(scan_rows)s + 1) s
),
scope_rows AS MATERIALIZED (
    SELECT m.id, m.user_id, m.agent_id, m.run_id, m.text, m.metadata, m.created_at,
           m.updated_at, m.namespace, m.key, m.ttl_minutes,
           m.embedding <=> %(embedding)s::vector AS distance, m.lexeme_count,
           CASE WHEN m.lexemes @@ (SELECT q.tsquery FROM query_terms q)
                 AND m.ts_config = %(ts_config)s::text THEN m.lexemes END AS lexemes,
           -- the neighbour step's reach (pgmem.scoring.MAX_NEIGHBOUR_WINDOW): lag and lead
           -- cost a fraction of a window frame's array per row
           lag(m.id, 1) OVER stored AS before_1, lag(m.id, 2) OVER stored AS before_2,
           lead(m.id, 1) OVER stored AS after_1, lead(m.id, 2) OVER stored AS after_2
      FROM {schema}.memories m
     WHERE (SELECT n FROM scope_size) <= %(scan_rows)s AND {scope}
    WINDOW stored AS (ORDER BY m.created_at, m.id)
),
-- Semantic leg: the scope's nearest rows.
semantic AS MATERIALIZED (
    (SELECT r.id, r.user_id, r.agent_id, r.run_id, r.text, r.metadata, r.created_at,
            r.updated_at, r.namespace, r.key, r.ttl_minutes, 1 - r.distance AS semantic
       FROM scope_rows r
      ORDER BY r.distance
      LIMIT %(semantic_limit)s)
    {large_scope_semantic}
),
-- Keyword leg: an OR query of the query's lemmas, scored by BM25 from the stored tsvector (term
-- frequency, document length, document frequency within the scope) or by ts_rank_cd.
scope_stats AS (
    SELECT count(*)::float8 AS n_docs, coalesce(avg(r.lexeme_count), 0)::float8 AS avg_len
      FROM scope_rows r
    HAVING (SELECT n FROM scope_size) <= %(scan_rows)s
    {large_scope_scope_stats}
),
keyword_docs AS MATERIALIZED (
    SELECT d.*,
           CASE WHEN %(keyword_score)s = 'ts_rank_cd'
                THEN ts_rank_cd(d.lexemes, (SELECT q.tsquery FROM query_terms q)) END AS rank_cd
      FROM ((SELECT r.id, r.lexemes, r.lexeme_count FROM scope_rows r WHERE r.lexemes IS NOT NULL)
            {large_scope_keyword_docs}
           ) d
),
-- Each query lexeme's frequency in each matching document, and its document frequency: a
-- document holding a query lexeme matches the OR query, so the matching documents are all the
-- scope's documents that hold it.
keyword_tf AS (
    SELECT t.id, t.lexeme_count, t.rank_cd, cardinality((t.u).positions)::float8 AS n,
           count(*) OVER (PARTITION BY (t.u).lexeme) AS df
      FROM (SELECT k.id, k.lexeme_count, k.rank_cd,
                   -- the document's query lexemes only (marked with weight A, then kept)
                   unnest(ts_filter(setweight(k.lexemes, 'A',
                                              (SELECT q.lexemes FROM query_terms q)), '{{a}}'))
                       AS u
              FROM keyword_docs k) t
),
keyword_scored AS MATERIALIZED (
    SELECT f.id, max(f.rank_cd) AS rank_cd,
           sum(ln(1 + (st.n_docs - f.df + 0.5) / (f.df + 0.5)) * f.n * (%(bm25_k1)s + 1)
               / (f.n + %(bm25_k1)s * (1 - %(bm25_b)s + %(bm25_b)s * f.lexeme_count
                                         / greatest(st.avg_len, 1)))) AS bm25
      FROM keyword_tf f
     CROSS JOIN scope_stats st
     GROUP BY f.id
),
keyword AS MATERIALIZED (  -- n: the rank in the leg, numbered after the top-N sort
    SELECT t.id, row_number() OVER (ORDER BY t.score DESC, t.id) AS n
      FROM (SELECT k.id, CASE WHEN %(keyword_score)s = 'bm25' THEN k.bm25
                              ELSE k.rank_cd END AS score
              FROM keyword_scored k
             ORDER BY score DESC, k.id
             LIMIT %(keyword_limit)s) t
),
-- Entity leg, driven from the scope: the entities the scope links (fetched by key), each query
-- entity compared exactly with those (its nearest ones with similarity >= the minimum), and the
-- scope's links of the matches. Its cost follows the scope, not the tenant's entity table, and
-- needs no iterative scan, so every pgvector version takes this path. A small scope's links
-- are read once (scope_links, on the index of a scope id: each link carries its memory's
-- scope ids) and serve both ends; a large scope's are read once for the entities they reach
-- (large_scope_entity_ids), and the matches' links by entity (large_scope_entity_links).
-- The query's candidate names (%(entity_names)s, pgmem.query_analysis) are looked up by name
-- (entities_name_key) and kept when the scope links them: an exact match, similarity 1.
{large_scope_kept_ids}
scope_links AS MATERIALIZED (
    SELECT m.memory_id, m.entity_id
      FROM {schema}.memory_entities m
     WHERE (cardinality(%(entity_embeddings)b::vector[]) > 0
            OR cardinality(%(entity_names)s::text[]) > 0)
       AND (SELECT n FROM scope_size) <= %(scan_rows)s
       AND m.tenant = %(tenant)s {scope_ids}
       -- the metadata filter, as a hashed subplan (IS TRUE: not a join, which a table without
       -- statistics yet had planned as a nested loop over scope_rows)
       AND (m.memory_id IN (SELECT r.id FROM scope_rows r)) IS TRUE
),
scope_entity_ids AS MATERIALIZED (
    SELECT DISTINCT l.entity_id FROM scope_links l
    {large_scope_entity_ids}
),
scope_entities AS MATERIALIZED (
    SELECT e.id, e.name, e.embedding
      FROM {schema}.entities e
     WHERE cardinality(%(entity_embeddings)b::vector[]) > 0 AND e.tenant = %(tenant)s
       AND e.id = ANY (ARRAY(SELECT s.entity_id FROM scope_entity_ids s))
),
entity_match AS MATERIALIZED (  -- once: never the inner side of a loop over the links
    SELECT q.n AS query_entity, e.id AS entity_id, e.name, e.similarity
      FROM unnest(%(entity_embeddings)b::vector[]) WITH ORDINALITY AS q(embedding, n)
     CROSS JOIN LATERAL (
            SELECT x.id, x.name,
                   -- on the model's semantic scale where it has one (%(scale_lo)s, %(scale_hi)s:
                   -- pgmem.scoring.stretch), so that the minimum means the same for any model
                   CASE WHEN %(scale_hi)s::float8 IS NULL THEN 1 - (x.embedding <=> q.embedding)
                        ELSE least(1, greatest(0, (1 - (x.embedding <=> q.embedding)
                                                   - %(scale_lo)s::float8)
                                                  / (%(scale_hi)s::float8 - %(scale_lo)s::float8)))
                   END AS similarity
              FROM scope_entities x
             ORDER BY x.embedding <=> q.embedding
             LIMIT %(entity_neighbours)s) e
     WHERE e.similarity >= %(entity_min_similarity)s
    UNION ALL
    SELECT cardinality(%(entity_embeddings)b::vector[]) + q.n, e.id, e.name, 1::float8
      FROM unnest(%(entity_names)s::text[]) WITH ORDINALITY AS q(name, n)
     CROSS JOIN LATERAL (  -- one probe of entities_name_key a name, whatever the plan's
            SELECT x.id, x.name  -- settings (LIMIT: a subquery the planner keeps as it is)
              FROM {schema}.entities x
             WHERE x.tenant = %(tenant)s AND x.name = q.name
             LIMIT 1) e
     WHERE (e.id IN (SELECT s.entity_id FROM scope_entity_ids s)) IS TRUE  -- a hashed subplan
),
entity_links AS MATERIALIZED (
    SELECT l.memory_id AS id, em.query_entity, em.entity_id, em.name, em.similarity
      FROM entity_match em
      JOIN scope_links l ON l.entity_id = em.entity_id
    {large_scope_entity_links}
),
-- The spread of a link: the memories of the scope the query entity reaches through matches at
-- least as similar as this one. Near-duplicate names ("Melanie", "Hi Melanie", "Mel") then
-- count as one common entity, while a weaker match ("Paris" for "Berlin") cannot make an
-- exact one look common.
entity_spread AS MATERIALIZED (
    SELECT m.query_entity, m.entity_id,
           (SELECT count(DISTINCT l.id)
              FROM entity_links l
             WHERE l.query_entity = m.query_entity AND l.similarity >= m.similarity) AS spread
      FROM (SELECT DISTINCT query_entity, entity_id, similarity FROM entity_links) m
),
entity_hits AS (
    SELECT l.id,
           array_agg(l.name) AS names, array_agg(l.similarity) AS similarities,
           array_agg(s.spread) AS spreads,
           max(l.similarity / (1 + %(spread_decay)s * (s.spread - 1) ^ 2)) AS rank
      FROM entity_links l
      JOIN entity_spread s USING (query_entity, entity_id)
     GROUP BY l.id
),
entity AS MATERIALIZED (
    SELECT t.id, row_number() OVER (ORDER BY t.rank DESC, t.id) AS n
      FROM (SELECT h.id, h.rank FROM entity_hits h
             ORDER BY h.rank DESC, h.id
             LIMIT %(entity_limit)s) t
),
-- Neighbour step: the memories stored up to %(neighbour_window)s places before (%(previous)s) and
-- after (%(next)s) each of the legs' best %(neighbour_limit)s, in the scope's (created_at, id)
-- order: read from scope_rows in a small scope, else one probe a side on the index of a scope id
-- (reading %(neighbour_window)s rows). A neighbour joins the candidates: an answer stored after
-- the question that matches the query comes in with it (pgmem.scoring: a memory counts at least
-- a share of its neighbours' scores).
leg_best AS MATERIALIZED (
    (SELECT s.id FROM semantic s
      WHERE %(previous)s::boolean OR %(next)s::boolean
      ORDER BY s.semantic DESC LIMIT %(neighbour_limit)s)
    UNION
    SELECT k.id FROM keyword k
     WHERE (%(previous)s::boolean OR %(next)s::boolean) AND k.n <= %(neighbour_limit)s
    UNION
    SELECT e.id FROM entity e
     WHERE (%(previous)s::boolean OR %(next)s::boolean) AND e.n <= %(neighbour_limit)s
),
{large_scope_leg_best_stored}
neighbours AS MATERIALIZED (  -- (earlier, later, distance): stored `distance` places apart
    SELECT x.earlier, x.later, x.distance
      FROM leg_best l
      JOIN scope_rows r ON r.id = l.id
     CROSS JOIN LATERAL (VALUES (r.before_1, r.id, 1, %(previous)s::boolean),
                                (r.before_2, r.id, 2, %(previous)s::boolean),
                                (r.id, r.after_1, 1, %(next)s::boolean),
                                (r.id, r.after_2, 2, %(next)s::boolean))
                  AS x(earlier, later, distance, wanted)
     WHERE x.wanted AND x.distance <= %(neighbour_window)s
       AND x.earlier IS NOT NULL AND x.later IS NOT NULL
    {large_scope_neighbours}
),
-- Each candidate's neighbours, one row a memory: those stored one and two places before it and
-- after it (one join below, not four: each would be a loop over the pairs).
neighbour_ids AS MATERIALIZED (
    SELECT n.id,
           (array_agg(n.other) FILTER (WHERE n.before AND n.distance = 1))[1] AS before_1,
           (array_agg(n.other) FILTER (WHERE n.before AND n.distance = 2))[1] AS before_2,
           (array_agg(n.other) FILTER (WHERE NOT n.before AND n.distance = 1))[1] AS after_1,
           (array_agg(n.other) FILTER (WHERE NOT n.before AND n.distance = 2))[1] AS after_2
      FROM (SELECT p.later AS id, p.earlier AS other, TRUE AS before, p.distance
              FROM neighbours p
            UNION ALL
            SELECT p.earlier, p.later, FALSE, p.distance FROM neighbours p) n
     GROUP BY n.id
),
-- Every candidate with its columns: the semantic leg's rows as they are, the other legs' rows
-- and the neighbours from scope_rows.
others AS (
    SELECT id FROM keyword UNION SELECT id FROM entity
    UNION SELECT earlier FROM neighbours UNION SELECT later FROM neighbours
    EXCEPT SELECT id FROM semantic
),
candidates AS (
    SELECT s.*, TRUE AS semantic_leg FROM semantic s
    UNION ALL
    SELECT r.id, r.user_id, r.agent_id, r.run_id, r.text, r.metadata, r.created_at,
           r.updated_at, r.namespace, r.key, r.ttl_minutes, 1 - r.distance, FALSE
      FROM others o
      JOIN scope_rows r ON r.id = o.id
    {large_scope_candidates}
)
SELECT c.id, c.user_id, c.agent_id, c.run_id, c.text, c.metadata::text AS metadata,
       c.created_at, c.updated_at, c.namespace, c.key, c.ttl_minutes, c.semantic, k.bm25, k.rank_cd, h.names AS entity_names,
       h.similarities AS entity_similarities, h.spreads AS entity_spreads,
       c.semantic_leg, c.id IN (SELECT id FROM keyword) AS keyword_leg,
       c.id IN (SELECT id FROM entity) AS entity_leg,
       (SELECT coalesce(cardinality(q.lexemes), 0) FROM query_terms q) AS query_terms,
       (SELECT st.n_docs FROM scope_stats st) AS keyword_n_docs,  -- the BM25 scale of the scope
       (SELECT n FROM scope_size) AS scope_size,  -- up to %(scan_rows)s + 1; entity weights use it
       x.before_1, x.before_2, x.after_1, x.after_2
  FROM (SELECT) AS answer  -- one row at least: without candidates, its columns NULL but sizes
  LEFT JOIN candidates c ON TRUE
  LEFT JOIN keyword_scored k ON k.id = c.id
  LEFT JOIN entity_hits h ON h.id = c.id
  LEFT JOIN neighbour_ids x ON x.id = c.id

-- name: large_scope_semantic
-- The semantic leg of a large scope: the HNSW index filtered by the scope (iterative scans keep
-- a filtered walk from under-returning), or on pgvector < 0.8 (%(exact_scan)s: no iterative
-- scans) every row of the scope.
UNION ALL
(SELECT m.id, m.user_id, m.agent_id, m.run_id, m.text, m.metadata, m.created_at,
        m.updated_at, m.namespace, m.key, m.ttl_minutes,
        1 - (m.embedding <=> %(embedding)s::vector) AS semantic
   FROM {schema}.memories m
  WHERE NOT %(exact_scan)s::boolean AND (SELECT n FROM scope_size) > %(scan_rows)s
    AND m.tenant = %(tenant)s COLLATE "C" AND ({scope}) IS TRUE
  ORDER BY m.embedding <=> %(embedding)s::vector
  LIMIT %(semantic_limit)s)
UNION ALL
(SELECT s.id, s.user_id, s.agent_id, s.run_id, s.text, s.metadata, s.created_at,
        s.updated_at, s.namespace, s.key, s.ttl_minutes, 1 - s.distance AS semantic
   FROM (SELECT m.id, m.user_id, m.agent_id, m.run_id, m.text, m.metadata, m.created_at,
                m.updated_at, m.namespace, m.key, m.ttl_minutes,
                m.embedding <=> %(embedding)s::vector AS distance
           FROM {schema}.memories m
          WHERE %(exact_scan)s::boolean AND (SELECT n FROM scope_size) > %(scan_rows)s
            AND {scope}
         OFFSET 0) s
  ORDER BY s.distance
  LIMIT %(semantic_limit)s)

-- name: large_scope_scope_stats
-- A large scope's BM25 statistics, read only when the query has keyword terms.
UNION ALL
SELECT count(*)::float8, coalesce(avg(m.lexeme_count), 0)::float8
  FROM {schema}.memories m
 WHERE (SELECT q.tsquery FROM query_terms q) IS NOT NULL
   AND (SELECT n FROM scope_size) > %(scan_rows)s AND {scope}
HAVING (SELECT n FROM scope_size) > %(scan_rows)s

-- name: large_scope_keyword_docs
-- A large scope's documents matching the query's terms: through the GIN index.
UNION ALL
(SELECT m.id, m.lexemes, m.lexeme_count
   FROM {schema}.memories m
  WHERE (SELECT q.tsquery FROM query_terms q) IS NOT NULL
    AND (SELECT n FROM scope_size) > %(scan_rows)s
    AND m.lexemes @@ (SELECT q.tsquery FROM query_terms q)
    AND m.ts_config = %(ts_config)s::text
    AND m.tenant = %(tenant)s COLLATE "C" AND ({scope}) IS TRUE)

-- name: large_scope_kept_ids
-- A CTE of its own: the memories of a large scope that a metadata filter keeps (%(filtered)s),
-- read once for large_scope_entity_ids and large_scope_entity_links, as a hashed subplan;
-- without a filter, never read.
kept_ids AS MATERIALIZED (
    SELECT m.id
      FROM {schema}.memories m
     WHERE %(filtered)s::boolean AND (SELECT n FROM scope_size) > %(scan_rows)s AND {scope}
),

-- name: large_scope_entity_ids
-- The entities a large scope links: one index range of its links (each carries its memory's
-- scope ids); with a metadata filter, those of the memories it keeps only (kept_ids).
UNION
SELECT m.entity_id
  FROM {schema}.memory_entities m
 WHERE (cardinality(%(entity_embeddings)b::vector[]) > 0
        OR cardinality(%(entity_names)s::text[]) > 0)
   AND (SELECT n FROM scope_size) > %(scan_rows)s
   AND m.tenant = %(tenant)s {scope_ids}
   AND (NOT %(filtered)s::boolean OR (m.memory_id IN (SELECT k.id FROM kept_ids k)) IS TRUE)

-- name: large_scope_entity_links
-- A large scope's links of the matched entities: read by entity (memory_entities_entity_idx),
-- one probe a match (OFFSET 0: not turned into a join over the tenant's links), those with
-- the scope's ids kept (and, with a metadata filter, those of the memories it keeps).
UNION ALL
SELECT l.memory_id, em.query_entity, em.entity_id, em.name, em.similarity
  FROM entity_match em
 CROSS JOIN LATERAL (
        SELECT m.memory_id
          FROM {schema}.memory_entities m
         WHERE (SELECT n FROM scope_size) > %(scan_rows)s
           AND m.tenant = %(tenant)s AND m.entity_id = em.entity_id {scope_ids}
           AND (NOT %(filtered)s::boolean
                OR (m.memory_id IN (SELECT k.id FROM kept_ids k)) IS TRUE)
        OFFSET 0) l

-- name: large_scope_leg_best_stored
-- A CTE of its own: when each of the legs' best was stored, for large_scope_neighbours.
leg_best_stored AS MATERIALIZED (
    SELECT l.id, c.created_at
      FROM leg_best l
     CROSS JOIN LATERAL (  -- by key (LIMIT: not turned into a join over the tenant's rows)
            SELECT m.created_at FROM {schema}.memories m
             WHERE m.tenant = %(tenant)s AND m.id = l.id LIMIT 1) c
     WHERE (SELECT n FROM scope_size) > %(scan_rows)s
),

-- name: large_scope_neighbours
-- A large scope's neighbours: one probe a side on the index of a scope id (reading
-- %(neighbour_window)s rows), from when each of the legs' best was stored.
UNION
SELECT p.id AS earlier, l.id AS later, p.distance
  FROM leg_best_stored l
 CROSS JOIN LATERAL (
        SELECT b.id, row_number() OVER (ORDER BY b.created_at DESC, b.id DESC) AS distance
          FROM (SELECT m.id, m.created_at
                  FROM {schema}.memories m
                 WHERE %(previous)s::boolean AND {scope}
                   AND (m.created_at, m.id) < (l.created_at, l.id)
                 ORDER BY m.created_at DESC, m.id DESC
                 LIMIT %(neighbour_window)s) b) p
UNION
SELECT l.id, n.id, n.distance
  FROM leg_best_stored l
 CROSS JOIN LATERAL (
        SELECT a.id, row_number() OVER (ORDER BY a.created_at, a.id) AS distance
          FROM (SELECT m.id, m.created_at
                  FROM {schema}.memories m
                 WHERE %(next)s::boolean AND {scope}
                   AND (m.created_at, m.id) > (l.created_at, l.id)
                 ORDER BY m.created_at, m.id
                 LIMIT %(neighbour_window)s) a) n

-- name: large_scope_candidates
-- A large scope's other candidates: fetched by key, one probe each (LIMIT: not turned into a
-- join over the tenant's rows, which a generic plan had read whole to hash them).
UNION ALL
SELECT m.id, m.user_id, m.agent_id, m.run_id, m.text, m.metadata, m.created_at,
       m.updated_at, m.namespace, m.key, m.ttl_minutes,
       1 - (m.embedding <=> %(embedding)s::vector), FALSE
  FROM others o
 CROSS JOIN LATERAL (
        SELECT x.id, x.user_id, x.agent_id, x.run_id, x.text, x.metadata, x.created_at,
               x.updated_at, x.namespace, x.key, x.ttl_minutes, x.embedding
          FROM {schema}.memories x
         WHERE x.tenant = %(tenant)s AND x.id = o.id
         LIMIT 1) m
 WHERE (SELECT n FROM scope_size) > %(scan_rows)s

-- name: lock_contents
-- The locks of an add, taken before insert_memories as a statement of its own (so that its
-- snapshot, taken after they are granted, sees whatever the previous holder committed; a
-- REPEATABLE READ transaction would not), through take_locks (sql/schema.sql), duplicate locks
-- first, so that concurrent writers cannot deadlock:
-- * with `dedupe`, per distinct (tenant, scope, content hash): exact duplicates have no unique
--   index to lean on, so adds of one text to one scope are serialised;
-- * per entity name of the batch (see lock_linked_entities): every writer of entity rows takes
--   these first, so that no writer waits for an entity row while holding another.
-- The keys hold the tenant's secret salt, which another tenant role cannot read; each kind
-- takes at most 256 locks, whatever the size of the batch.
SELECT {schema}.take_locks(
           %(tenant)s::text, x.salt, 'content',
           ARRAY(SELECT DISTINCT jsonb_build_array(i.user_id, i.agent_id, i.run_id,
                                                   i.content_hash)::text
                   FROM unnest(%(user_ids)s::text[], %(agent_ids)s::text[], %(run_ids)s::text[],
                               %(content_hashes)s::text[])
                        AS i(user_id, agent_id, run_id, content_hash)
                  WHERE %(dedupe)s::boolean)) AS contents,
       {schema}.take_locks(%(tenant)s::text, x.salt, 'entity', %(entity_names)s::text[])
           AS entities
  FROM (SELECT (SELECT s.lock_salt FROM {schema}.tenant_secrets s
                 WHERE s.tenant = %(tenant)s::text) AS salt) x

-- name: insert_memories
-- A batch of memories with their entities, links and ADD events, in one statement. Returns one
-- row per item, in item order: the memory that stands for it, and whether it was a duplicate.
-- With `dedupe` an item is not stored when its scope (NULLs equal) already holds a memory with
-- its content hash, or when an earlier item of the batch has the same scope and hash; its row is
-- then that memory's. Entities come as distinct variants (entity_names, entity_labels, and the
-- vectors of their surface forms) and their occurrences in items (occurrence_items,
-- occurrence_entities; 1-based); each name is upserted
-- with the variant of its first occurrence in a stored item -- as one-by-one adds would -- in
-- name order, so that concurrent writers lock entity rows in the same order.
-- An import (pgmem.importers) gives items their ids and timestamps (`ids`, `created_ats`,
-- `updated_ats`; NULL: made here): an item whose id the tenant already has in the item's scope
-- is not stored again and counts as a duplicate; items with ids are never deduplicated by
-- content.
WITH item AS (
    SELECT i.*,
           CASE WHEN %(dedupe)s::boolean AND i.given_id IS NULL
                THEN min(i.ord) OVER (PARTITION BY i.user_id, i.agent_id, i.run_id,
                                                   i.content_hash, i.given_id IS NULL)
                ELSE i.ord END AS first_ord
      FROM (SELECT u.*,
                   CASE WHEN u.namespace_labels IS NOT NULL
                        THEN ARRAY(SELECT jsonb_array_elements_text(u.namespace_labels))
                   END AS namespace
              FROM unnest(%(user_ids)s::text[], %(agent_ids)s::text[], %(run_ids)s::text[],
                          %(texts)s::text[], %(content_hashes)s::text[], %(metadata)s::jsonb[],
                          %(embeddings)b::vector[], %(lexemes)s::text[],
                          %(lexeme_counts)s::int[], %(ids)s::uuid[],
                          %(created_ats)s::timestamptz[], %(updated_ats)s::timestamptz[],
                          %(namespaces)s::jsonb[], %(keys)s::text[],
                          %(ttl_minutes)s::float8[])
                   WITH ORDINALITY AS u(user_id, agent_id, run_id, text, content_hash, metadata,
                                        embedding, lexemes, lexeme_count, given_id,
                                        given_created_at, given_updated_at, namespace_labels,
                                        key, ttl_minutes, ord)) i
),
existing AS (
    SELECT i.ord, x.id
      FROM item i
     CROSS JOIN LATERAL (
            SELECT m.id
              FROM {schema}.memories m
             WHERE m.tenant = %(tenant)s AND m.content_hash = i.content_hash
               AND m.user_id IS NOT DISTINCT FROM i.user_id
               AND m.agent_id IS NOT DISTINCT FROM i.agent_id
               AND m.run_id IS NOT DISTINCT FROM i.run_id
             ORDER BY m.created_at, m.id
             LIMIT 1) x
     WHERE %(dedupe)s::boolean AND i.ord = i.first_ord AND i.given_id IS NULL
    UNION ALL
    -- an id brought again into its own scope (an import run twice); an id taken in another
    -- scope never comes back as a duplicate (taken_ids refused it first; one taken since
    -- fails the insert on the primary key)
    SELECT i.ord, m.id
      FROM item i
      JOIN {schema}.memories m ON m.tenant = %(tenant)s AND m.id = i.given_id
     WHERE m.user_id IS NOT DISTINCT FROM i.user_id
       AND m.agent_id IS NOT DISTINCT FROM i.agent_id
       AND m.run_id IS NOT DISTINCT FROM i.run_id
),
-- A memory's created_at is its statement's start plus a microsecond per item before it, so that
-- (created_at, id) is the order memories were stored in, also within a batch and across the
-- batches of one transaction (the search's neighbour step and get_all read that order).
fresh AS MATERIALIZED (
    SELECT coalesce(i.given_id, gen_random_uuid()) AS id,
           coalesce(i.given_created_at,
                    statement_timestamp() + (i.ord - 1) * interval '1 microsecond') AS created,
           i.*
      FROM item i
     WHERE i.ord = i.first_ord AND NOT EXISTS (SELECT FROM existing x WHERE x.ord = i.ord)
),
memory AS (
    INSERT INTO {schema}.memories
           (tenant, id, user_id, agent_id, run_id, text, content_hash, metadata,
            embedding, lexemes, lexeme_count, ts_config, created_at, updated_at,
            namespace, key, ttl_minutes, expires_at)
    SELECT %(tenant)s, f.id, f.user_id, f.agent_id, f.run_id, f.text, f.content_hash, f.metadata,
           f.embedding, coalesce(f.lexemes::tsvector, p.lexemes),
           coalesce(f.lexeme_count, p.lexeme_count), %(ts_config)s::text,
           f.created, coalesce(f.given_updated_at, f.created),
           f.namespace, f.key, f.ttl_minutes,
           statement_timestamp() + f.ttl_minutes * interval '1 minute'
      FROM fresh f
      -- An item without lexemes: PostgreSQL makes them in the text search configuration
      -- %(ts_config)s (no spaCy model for it), counting their positions for BM25.
      LEFT JOIN LATERAL (
            SELECT v.lexemes,
                   (SELECT count(*)::int FROM unnest(v.lexemes) u, unnest(u.positions) n)
                       AS lexeme_count
              FROM (SELECT to_tsvector(%(ts_config)s::regconfig, f.text) AS lexemes) v
             WHERE f.lexemes IS NULL) p ON TRUE
     ORDER BY f.ord
    RETURNING id, user_id, agent_id, run_id, text, metadata, created_at, updated_at
),
variant AS (
    SELECT v.ord AS variant, v.name, v.label, v.embedding
      FROM unnest(%(entity_names)s::text[], %(entity_labels)s::text[],
                  %(entity_embeddings)b::vector[]) WITH ORDINALITY AS v(name, label, embedding, ord)
),
occurrence AS (
    SELECT o.ord, f.id AS memory_id, f.user_id, f.agent_id, f.run_id, f.namespace, v.name,
           v.label, v.embedding
      FROM unnest(%(occurrence_items)s::int[], %(occurrence_entities)s::int[])
           WITH ORDINALITY AS o(item, variant, ord)
      JOIN fresh f ON f.ord = o.item
      JOIN variant v ON v.variant = o.variant
),
entity AS (
    INSERT INTO {schema}.entities AS e (tenant, name, label, embedding)
    SELECT %(tenant)s, n.name, n.label, n.embedding
      FROM (SELECT DISTINCT ON (o.name) o.name, o.label, o.embedding
              FROM occurrence o
             ORDER BY o.name, o.ord) n
     ORDER BY n.name
        ON CONFLICT (tenant, name) DO UPDATE SET name = EXCLUDED.name
    RETURNING e.id, e.name
),
link AS (
    INSERT INTO {schema}.memory_entities
           (tenant, memory_id, entity_id, user_id, agent_id, run_id, namespace)
    SELECT %(tenant)s, o.memory_id, e.id, o.user_id, o.agent_id, o.run_id, o.namespace
      FROM occurrence o
      JOIN entity e ON e.name = o.name
),
event AS (
    INSERT INTO {schema}.history (tenant, memory_id, event, new_text, created_at)
    SELECT %(tenant)s, f.id, 'ADD', f.text, f.created
      FROM fresh f
     ORDER BY f.ord
),
stored AS (
    SELECT * FROM memory
    UNION ALL
    SELECT m.id, m.user_id, m.agent_id, m.run_id, m.text, m.metadata, m.created_at, m.updated_at
      FROM existing x
      JOIN {schema}.memories m ON m.tenant = %(tenant)s AND m.id = x.id
)
SELECT s.id, s.user_id, s.agent_id, s.run_id, s.text, s.metadata, s.created_at, s.updated_at,
       (i.ord <> i.first_ord OR x.id IS NOT NULL) AS duplicate,
       -- lock_contents only serialises duplicates when each statement takes a new snapshot:
       -- the caller refuses dedupe under REPEATABLE READ (see pgmem.builders.insert_steps).
       current_setting('transaction_isolation') AS isolation
  FROM item i
  LEFT JOIN existing x ON x.ord = i.first_ord
  LEFT JOIN fresh f ON f.ord = i.first_ord
  JOIN stored s ON s.id = coalesce(x.id, f.id)
 ORDER BY i.ord

-- name: restore_memories
-- After an import's insert, in its transaction: what a memory brings from an export that the
-- insert does not write -- its expiry and origin, and its history, which replaces the ADD event
-- the insert wrote. Only for the memories the insert has just made (`ids`), never one that was
-- there before. The history of each of `replaced_ids` is replaced by its events: `event_ids[k]`
-- is the memory of event k (in the order to write them). Each
-- data-modifying CTE runs whether or not the INSERT reads it, in the statement's one snapshot:
-- the DELETE does not see the events the INSERT writes.
WITH memory AS (
    UPDATE {schema}.memories m
       SET expires_at = r.expires_at, origin = r.origin
      FROM unnest(%(ids)s::uuid[], %(expires_ats)s::timestamptz[], %(origins)s::jsonb[])
           AS r(id, expires_at, origin)
     WHERE m.tenant = %(tenant)s AND m.id = r.id
       AND (r.expires_at IS NOT NULL OR r.origin IS NOT NULL)
    RETURNING m.id
),
replaced AS (
    DELETE FROM {schema}.history h
     WHERE h.tenant = %(tenant)s AND h.memory_id = ANY(%(replaced_ids)s::uuid[])
    RETURNING h.id
)
INSERT INTO {schema}.history (tenant, memory_id, event, old_text, new_text, created_at)
SELECT %(tenant)s, e.memory_id, e.event, e.old_text, e.new_text, e.created_at
  FROM unnest(%(event_ids)s::uuid[], %(events)s::text[], %(old_texts)s::text[],
              %(new_texts)s::text[], %(event_times)s::timestamptz[])
       WITH ORDINALITY AS e(memory_id, event, old_text, new_text, created_at, ord)
 ORDER BY e.ord

-- name: known_ids
-- Which of `ids` the tenant has as a memory or in its history (restore_deleted_history writes
-- none of those). Two ranges of primary-key-led indexes; on Citus both routed to the tenant.
SELECT m.id
  FROM {schema}.memories m
 WHERE m.tenant = %(tenant)s AND m.id = ANY(%(ids)s::uuid[])
UNION
SELECT h.memory_id
  FROM {schema}.history h
 WHERE h.tenant = %(tenant)s AND h.memory_id = ANY(%(ids)s::uuid[])

-- name: restore_deleted_history
-- An import's events of memories deleted before their export (pgmem export --all --history),
-- in the order given (`event_ids[k]` the memory of event k), for ids known_ids did not name in
-- the same transaction: a file never adds to what the tenant holds (an import run again writes
-- nothing). The memory id of each event written.
INSERT INTO {schema}.history (tenant, memory_id, event, old_text, new_text, created_at)
SELECT %(tenant)s, e.memory_id, e.event, e.old_text, e.new_text, e.created_at
  FROM unnest(%(event_ids)s::uuid[], %(events)s::text[], %(old_texts)s::text[],
              %(new_texts)s::text[], %(event_times)s::timestamptz[])
       WITH ORDINALITY AS e(memory_id, event, old_text, new_text, created_at, ord)
 ORDER BY e.ord
RETURNING memory_id

-- name: routed_batch_plan
-- insert_memories on Citus (see pgmem.routed): what it decides before it writes, as one read
-- Citus routes to the tenant's worker. Per item (1-based `ord`, in item order): the earlier item
-- of the batch it repeats (`first_ord`; its own ord when none), the memory that already stands
-- for it (`id` and that memory's columns; NULL when none), the lexemes PostgreSQL makes for an
-- item that brings none, and the transaction's isolation level.
SELECT i.ord, i.first_ord, x.id, x.user_id, x.agent_id, x.run_id, x.text, x.metadata,
       x.created_at, x.updated_at, p.lexemes::text AS made_lexemes,
       (SELECT count(*)::int FROM unnest(p.lexemes) u, unnest(u.positions) n)
           AS made_lexeme_count,
       current_setting('transaction_isolation') AS isolation
  FROM (SELECT u.*,
               CASE WHEN %(dedupe)s::boolean AND u.given_id IS NULL
                    THEN min(u.ord) OVER (PARTITION BY u.user_id, u.agent_id, u.run_id,
                                                       u.content_hash, u.given_id IS NULL)
                    ELSE u.ord END AS first_ord
          FROM unnest(%(user_ids)s::text[], %(agent_ids)s::text[], %(run_ids)s::text[],
                      %(texts)s::text[], %(content_hashes)s::text[], %(ids)s::uuid[],
                      %(lexemes)s::text[])
               WITH ORDINALITY AS u(user_id, agent_id, run_id, text, content_hash, given_id,
                                    lexemes, ord)) i
  LEFT JOIN LATERAL (
        -- as insert_memories' `existing`: the scope's oldest memory with the text, or the
        -- memory with the item's id in the item's scope
        SELECT m.id, m.user_id, m.agent_id, m.run_id, m.text, m.metadata, m.created_at,
               m.updated_at
          FROM {schema}.memories m
         WHERE m.tenant = %(tenant)s
           AND m.user_id IS NOT DISTINCT FROM i.user_id
           AND m.agent_id IS NOT DISTINCT FROM i.agent_id
           AND m.run_id IS NOT DISTINCT FROM i.run_id
           AND CASE WHEN i.given_id IS NULL
                    THEN %(dedupe)s::boolean AND i.ord = i.first_ord
                         AND m.content_hash = i.content_hash
                    ELSE m.id = i.given_id END
         ORDER BY m.created_at, m.id
         LIMIT 1) x ON TRUE
  LEFT JOIN LATERAL (
        SELECT to_tsvector(%(ts_config)s::regconfig, i.text) AS lexemes
         WHERE i.lexemes IS NULL) p ON TRUE
 ORDER BY i.ord

-- name: routed_insert_memories
-- insert_memories' new memories on Citus, {rows} of routed_memory_row: a multi-row INSERT Citus
-- routes to the tenant's worker as it is (an INSERT fed by a SELECT of arrays it would run
-- through the coordinator, with two-phase commit).
INSERT INTO {schema}.memories
       (tenant, id, user_id, agent_id, run_id, text, content_hash, metadata, embedding, lexemes,
        lexeme_count, ts_config, created_at, updated_at, namespace, key, ttl_minutes,
        expires_at)
VALUES {rows}

-- name: routed_memory_row
-- A row of routed_insert_memories; created_at as insert_memories makes it: the statement's
-- start plus a microsecond per item before the item (`before`).
(%(tenant)s, %(id)s::uuid, %(user_id)s::text, %(agent_id)s::text, %(run_id)s::text,
 %(text)s::text, %(content_hash)s::text, %(metadata)s::jsonb, %(embedding)s::vector,
 %(lexemes)s::tsvector, %(lexeme_count)s::int, %(ts_config)s::text,
 coalesce(%(created_at)s::timestamptz,
          statement_timestamp() + %(before)s::int * interval '1 microsecond'),
 coalesce(%(updated_at)s::timestamptz, %(created_at)s::timestamptz,
          statement_timestamp() + %(before)s::int * interval '1 microsecond'),
 %(namespace)s::text[], %(key)s::text, %(ttl_minutes)s::float8,
 statement_timestamp() + %(ttl_minutes)s::float8 * interval '1 minute')

-- name: routed_insert_entities
-- insert_memories' entities on Citus, {rows} of routed_entity_row, in name order.
INSERT INTO {schema}.entities AS e (tenant, name, label, embedding)
VALUES {rows}
    ON CONFLICT (tenant, name) DO UPDATE SET name = EXCLUDED.name

-- name: routed_entity_row
(%(tenant)s, %(name)s::text, %(label)s::text, %(embedding)s::vector)

-- name: routed_link_memories
-- insert_memories' links on Citus: each new memory (`link_memories`) to its entities by name
-- (`link_names`), with the memory's scope ids. Citus runs it on the tenant's worker: every
-- table it reads is the tenant's.
INSERT INTO {schema}.memory_entities
       (tenant, memory_id, entity_id, user_id, agent_id, run_id, namespace)
SELECT m.tenant, m.id, e.id, m.user_id, m.agent_id, m.run_id, m.namespace
  FROM unnest(%(link_memories)s::uuid[], %(link_names)s::text[]) AS o(memory_id, name)
  JOIN {schema}.memories m ON m.tenant = %(tenant)s AND m.id = o.memory_id
  JOIN {schema}.entities e ON e.tenant = m.tenant AND e.name = o.name

-- name: routed_events
-- History events on Citus, {rows} of routed_event_row, in the order given.
INSERT INTO {schema}.history (tenant, memory_id, event, old_text, new_text, created_at)
VALUES {rows}

-- name: routed_event_row
(%(tenant)s, %(memory_id)s::uuid, %(event)s::text, %(old_text)s::text, %(new_text)s::text,
 coalesce(%(created_at)s::timestamptz, now()))

-- name: routed_stored
SELECT m.id, m.user_id, m.agent_id, m.run_id, m.text, m.metadata, m.created_at, m.updated_at
  FROM {schema}.memories m
 WHERE m.tenant = %(tenant)s AND m.id = ANY(%(fresh_ids)s::uuid[])

-- name: routed_linked
-- delete_memories on Citus (see pgmem.routed), first: the entities the memories link to.
SELECT DISTINCT me.entity_id
  FROM {schema}.memory_entities me
 WHERE me.tenant = %(tenant)s AND me.memory_id = ANY(%(ids)s::uuid[])

-- name: routed_delete_memories
-- delete_memories on Citus, then: the memories (their links go with them).
DELETE FROM {schema}.memories m
 WHERE m.tenant = %(tenant)s AND m.id = ANY(%(ids)s::uuid[])
RETURNING m.id, m.text

-- name: routed_delete_orphans
-- On Citus, last: the entities among `entity_ids` that no memory links to any more.
DELETE FROM {schema}.entities e
 WHERE e.tenant = %(tenant)s AND e.id = ANY(%(entity_ids)s::uuid[])
   AND NOT EXISTS (SELECT FROM {schema}.memory_entities me
                    WHERE me.tenant = %(tenant)s AND me.entity_id = e.id)

-- name: routed_update_memory
-- update_memory on Citus (see pgmem.routed), first: the memory's new text, vector and lexemes
-- or metadata, as update_memory sets them; the row, with the text it had (`old_text`).
UPDATE {schema}.memories m
   SET text = coalesce(%(text)s::text, m.text),
       content_hash = coalesce(%(content_hash)s::text, m.content_hash),
       embedding = coalesce(%(embedding)s::vector, m.embedding),
       lexemes = coalesce(%(lexemes)s::tsvector,
                          to_tsvector(%(ts_config)s::regconfig, %(postgres_text)s::text),
                          m.lexemes),
       lexeme_count = coalesce(
           %(lexeme_count)s::int,
           CASE WHEN %(postgres_text)s::text IS NOT NULL
                THEN (SELECT count(*)::int
                        FROM unnest(to_tsvector(%(ts_config)s::regconfig,
                                                %(postgres_text)s::text)) u,
                             unnest(u.positions) n)
           END,
           m.lexeme_count),
       ts_config = CASE WHEN %(text)s::text IS NULL THEN m.ts_config
                        ELSE %(ts_config)s::text END,
       metadata = coalesce(%(metadata)s::jsonb, m.metadata),
       updated_at = now()
  FROM {schema}.memories old
 WHERE m.tenant = %(tenant)s AND m.id = %(id)s::uuid
   AND old.tenant = m.tenant AND old.id = m.id
RETURNING m.id, m.user_id, m.agent_id, m.run_id, m.text, m.metadata, m.created_at,
          m.updated_at, old.text AS old_text

-- name: routed_relink_memory
-- update_memory on Citus, for a new text: the memory linked to its entities (upserted before by
-- routed_insert_entities), with its scope ids.
INSERT INTO {schema}.memory_entities
       (tenant, memory_id, entity_id, user_id, agent_id, run_id, namespace)
SELECT m.tenant, m.id, e.id, m.user_id, m.agent_id, m.run_id, m.namespace
  FROM {schema}.memories m
  JOIN {schema}.entities e ON e.tenant = m.tenant AND e.name = ANY(%(entity_names)s::text[])
 WHERE m.tenant = %(tenant)s AND m.id = %(id)s::uuid
    ON CONFLICT DO NOTHING

-- name: routed_unlink_memory
-- update_memory on Citus, for a new text: the links to entities the text no longer names; the
-- entities unlinked.
DELETE FROM {schema}.memory_entities me
 WHERE me.tenant = %(tenant)s AND me.memory_id = %(id)s::uuid
   AND me.entity_id NOT IN (SELECT e.id FROM {schema}.entities e
                             WHERE e.tenant = %(tenant)s
                               AND e.name = ANY(%(entity_names)s::text[]))
RETURNING me.entity_id

-- name: taken_ids
-- The items of a batch (1-based) whose given id a memory of the tenant has in another scope.
-- Run before insert_memories. (A deleted memory's id may be brought back: an import restoring
-- it; history guarded by a scope shows only the events since its latest DELETE.)
SELECT i.ord
  FROM unnest(%(ids)s::uuid[], %(user_ids)s::text[], %(agent_ids)s::text[], %(run_ids)s::text[])
       WITH ORDINALITY AS i(id, user_id, agent_id, run_id, ord)
  JOIN {schema}.memories m ON m.tenant = %(tenant)s AND m.id = i.id
 WHERE m.user_id IS DISTINCT FROM i.user_id OR m.agent_id IS DISTINCT FROM i.agent_id
    OR m.run_id IS DISTINCT FROM i.run_id

-- name: stored_duplicates
-- The memories that already hold the items' texts in their scopes (NULLs equal), checked before
-- a batch's model work so that texts already stored are neither analysed nor embedded again:
-- for each item (1-based `ord`) that has one, the oldest such memory. insert_memories checks
-- again under its locks, for what was added meanwhile.
SELECT i.ord, x.id, x.user_id, x.agent_id, x.run_id, x.text, x.metadata, x.created_at,
       x.updated_at, TRUE AS duplicate
  FROM unnest(%(user_ids)s::text[], %(agent_ids)s::text[], %(run_ids)s::text[],
              %(content_hashes)s::text[])
       WITH ORDINALITY AS i(user_id, agent_id, run_id, content_hash, ord)
 CROSS JOIN LATERAL (
        SELECT m.id, m.user_id, m.agent_id, m.run_id, m.text, m.metadata, m.created_at,
               m.updated_at
          FROM {schema}.memories m
         WHERE m.tenant = %(tenant)s AND m.content_hash = i.content_hash
           AND m.user_id IS NOT DISTINCT FROM i.user_id
           AND m.agent_id IS NOT DISTINCT FROM i.agent_id
           AND m.run_id IS NOT DISTINCT FROM i.run_id
         ORDER BY m.created_at, m.id
         LIMIT 1) x
 ORDER BY i.ord

-- name: get_memory
SELECT m.id, m.user_id, m.agent_id, m.run_id, m.text, m.metadata, m.created_at, m.updated_at
  FROM {schema}.memories m
 WHERE m.tenant = %(tenant)s AND m.id = %(id)s::uuid

-- name: list_memories
-- One page of the scope's memories in (created_at, id) order, after the cursor's position (keyset
-- paging: no row is skipped or repeated while others are added or deleted). Ask for one row more
-- than the page holds to learn whether another page follows. The index of the scope id ends with
-- (created_at, id): a page is one index range starting at the cursor (the first page's cursor is
-- before every row), read in order -- no sort of the scope, in a custom or a generic plan.
SELECT m.id, m.user_id, m.agent_id, m.run_id, m.text, m.metadata, m.created_at, m.updated_at
  FROM {schema}.memories m
 WHERE {scope}
   AND (m.created_at, m.id)
       > (coalesce(%(after_created_at)s::timestamptz, '-infinity'),
          coalesce(%(after_id)s::uuid, '00000000-0000-0000-0000-000000000000'))
 ORDER BY m.created_at, m.id
 LIMIT %(limit)s

-- name: memory_history
-- A memory's events in the order they were written (the identity column), also after a delete.
SELECT h.event, h.old_text, h.new_text, h.created_at
  FROM {schema}.history h
 WHERE h.tenant = %(tenant)s AND h.memory_id = %(id)s::uuid
 ORDER BY h.id

-- name: lock_memory
-- The memory an update or delete is about, locked until the transaction ends; no row if none.
SELECT m.id
  FROM {schema}.memories m
 WHERE m.tenant = %(tenant)s AND m.id = %(id)s::uuid
   FOR UPDATE

-- name: lock_update_content
-- The duplicate lock of an update's new text: the lock lock_contents takes for an add of that
-- text to the memory's scope, so that an add or another update of the same text to the scope
-- waits for this one. A statement of its own, before update_duplicate, whose snapshot then sees
-- whatever the previous holder committed.
SELECT {schema}.take_locks(
           %(tenant)s::text,
           (SELECT s.lock_salt FROM {schema}.tenant_secrets s WHERE s.tenant = %(tenant)s::text),
           'content',
           ARRAY(SELECT jsonb_build_array(m.user_id, m.agent_id, m.run_id,
                                          %(content_hash)s::text)::text
                   FROM {schema}.memories m
                  WHERE m.tenant = %(tenant)s AND m.id = %(id)s::uuid))

-- name: update_duplicate
-- Another memory of the memory's scope (NULLs equal) with the update's new text; no row if none.
SELECT d.id
  FROM {schema}.memories m
  JOIN {schema}.memories d
    ON d.tenant = m.tenant AND d.content_hash = %(content_hash)s::text AND d.id <> m.id
   AND d.user_id IS NOT DISTINCT FROM m.user_id
   AND d.agent_id IS NOT DISTINCT FROM m.agent_id
   AND d.run_id IS NOT DISTINCT FROM m.run_id
 WHERE m.tenant = %(tenant)s AND m.id = %(id)s::uuid
 LIMIT 1

-- name: lock_scope_memories
-- The ids of the scope's memories, locked (in id order) for delete_all.
SELECT m.id
  FROM {schema}.memories m
 WHERE {scope}
 ORDER BY m.id
   FOR UPDATE

-- name: lock_linked_entities
-- The entity-name locks of an update or delete: the names of the entities linked to memories
-- `ids`, and the new text's `entity_names` (empty for a delete) -- the locks lock_contents takes
-- for an add, through take_locks, in one pass in key order, and never more than 256 whatever
-- the number of memories and entities (a key stands for a bucket of names). Row locks taken in
-- two steps (the old entities here, the new ones during the change) would let an add holding a
-- new entity wait for an old one: a deadlock.
-- Sent before the change as a statement of its own, because deleting an entity once no link is
-- left is a check-then-act: with the locks held, a writer linking one of these entities waits
-- for the change to commit (and then re-creates the entity if it was deleted), and the change's
-- snapshot sees every link committed before the locks.
SELECT {schema}.take_locks(
           %(tenant)s::text,
           (SELECT s.lock_salt FROM {schema}.tenant_secrets s WHERE s.tenant = %(tenant)s::text),
           'entity',
           ARRAY(SELECT e.name
                   FROM {schema}.entities e
                  WHERE e.tenant = %(tenant)s
                    AND e.id IN (SELECT me.entity_id
                                   FROM {schema}.memory_entities me
                                  WHERE me.tenant = %(tenant)s
                                    AND me.memory_id = ANY(%(ids)s::uuid[]))
                 UNION
                 SELECT unnest(%(entity_names)s::text[])))

-- name: update_memory
-- A memory's new text and/or metadata (NULL parameters keep the stored value) and its UPDATE
-- event. With `relink` (a new text) its entities are upserted and linked, its links to entities
-- the new text lacks are removed, and those entities are deleted if no other memory links them.
-- Run after lock_memory and lock_linked_entities. No row when the memory does not exist.
WITH old AS (
    SELECT m.id, m.text, m.user_id, m.agent_id, m.run_id, m.namespace
      FROM {schema}.memories m
     WHERE m.tenant = %(tenant)s AND m.id = %(id)s::uuid
),
-- A new text whose lexemes PostgreSQL makes (%(postgres_text)s, else NULL: no row), and their
-- count of positions.
postgres_lexemes AS (
    SELECT v.lexemes,
           (SELECT count(*)::int FROM unnest(v.lexemes) u, unnest(u.positions) n) AS lexeme_count
      FROM (SELECT to_tsvector(%(ts_config)s::regconfig, %(postgres_text)s::text) AS lexemes) v
     WHERE v.lexemes IS NOT NULL
),
memory AS (
    UPDATE {schema}.memories m
       SET text = coalesce(%(text)s::text, m.text),
           content_hash = coalesce(%(content_hash)s::text, m.content_hash),
           embedding = coalesce(%(embedding)s::vector, m.embedding),
           lexemes = coalesce(%(lexemes)s::tsvector,
                              (SELECT p.lexemes FROM postgres_lexemes p), m.lexemes),
           lexeme_count = coalesce(%(lexeme_count)s::int,
                                   (SELECT p.lexeme_count FROM postgres_lexemes p), m.lexeme_count),
           ts_config = CASE WHEN %(text)s::text IS NULL THEN m.ts_config
                            ELSE %(ts_config)s::text END,
           metadata = coalesce(%(metadata)s::jsonb, m.metadata),
           updated_at = now()
      FROM old
     WHERE m.tenant = %(tenant)s AND m.id = old.id
    RETURNING m.tenant, m.id, m.user_id, m.agent_id, m.run_id, m.text, m.metadata,
              m.created_at, m.updated_at, old.text AS old_text
),
entity AS (
    INSERT INTO {schema}.entities AS e (tenant, name, label, embedding)
    SELECT %(tenant)s, n.name, n.label, n.embedding
      FROM unnest(%(entity_names)s::text[], %(entity_labels)s::text[],
                  %(entity_embeddings)b::vector[]) AS n(name, label, embedding)
     WHERE %(relink)s::boolean AND EXISTS (SELECT FROM old)
     ORDER BY n.name
        ON CONFLICT (tenant, name) DO UPDATE SET name = EXCLUDED.name
    RETURNING e.id
),
link AS (
    INSERT INTO {schema}.memory_entities
           (tenant, memory_id, entity_id, user_id, agent_id, run_id, namespace)
    SELECT %(tenant)s, old.id, entity.id, old.user_id, old.agent_id, old.run_id, old.namespace
      FROM old CROSS JOIN entity
        ON CONFLICT DO NOTHING
),
unlink AS (
    DELETE FROM {schema}.memory_entities me
     USING old
     WHERE %(relink)s::boolean AND me.tenant = %(tenant)s AND me.memory_id = old.id
       AND me.entity_id NOT IN (SELECT entity.id FROM entity)
    RETURNING me.entity_id
),
orphan AS (
    DELETE FROM {schema}.entities e
     WHERE e.tenant = %(tenant)s
       AND e.id IN (SELECT unlink.entity_id FROM unlink)
       AND NOT EXISTS (SELECT FROM {schema}.memory_entities me
                        WHERE me.tenant = %(tenant)s AND me.entity_id = e.id
                          AND me.memory_id <> %(id)s::uuid)
),
event AS (
    INSERT INTO {schema}.history (tenant, memory_id, event, old_text, new_text)
    SELECT memory.tenant, memory.id, 'UPDATE', memory.old_text, memory.text
      FROM memory
)
SELECT id, user_id, agent_id, run_id, text, metadata, created_at, updated_at FROM memory

-- name: delete_memories
-- Memories by id, with a DELETE event each; their links go by cascade, and the entities they
-- linked that no other memory links are deleted. Run after lock_linked_entities. Returns the
-- ids deleted. The entities they link are read in a CTE of their own, first: Citus runs each
-- CTE of a statement it cannot route whole as a step of its own, so that a later one would
-- see the links already gone by cascade (PostgreSQL runs them all on one snapshot).
WITH linked AS MATERIALIZED (
    SELECT DISTINCT me.entity_id
      FROM {schema}.memory_entities me
     WHERE me.tenant = %(tenant)s AND me.memory_id = ANY(%(ids)s::uuid[])
),
memory AS (
    DELETE FROM {schema}.memories m
     WHERE m.tenant = %(tenant)s AND m.id = ANY(%(ids)s::uuid[])
    RETURNING m.tenant, m.id, m.text
),
event AS (
    INSERT INTO {schema}.history (tenant, memory_id, event, old_text)
    SELECT memory.tenant, memory.id, 'DELETE', memory.text
      FROM memory
),
orphan AS (
    DELETE FROM {schema}.entities e
     WHERE e.tenant = %(tenant)s
       AND e.id IN (SELECT l.entity_id FROM linked l)
       AND NOT EXISTS (SELECT FROM {schema}.memory_entities me
                        WHERE me.tenant = %(tenant)s AND me.entity_id = e.id
                          AND me.memory_id <> ALL(%(ids)s::uuid[]))
)
SELECT id FROM memory

-- name: text_search_configs
-- The text search configurations a call may name, as regconfig names them (schema-qualified
-- when the search path does not reach them).
SELECT c.oid::regconfig::text AS name FROM pg_ts_config c ORDER BY 1

-- name: search_settings
-- The search's settings, sent in the same round trip as the search statement, before it, and
-- local to the transaction both run in (on a connection of pgmem's own, the implicit one of
-- that round trip): the statement's generic plan (planning it costs more than running it;
-- on Citus, search_settings_citus), made without JIT (its generic cost passes
-- jit_above_cost on a large table: 60 ms of compiling per call at 1M rows) and without
-- sequential scans where another path exists: a generic plan estimates a scope at
-- 1/n_distinct of the table, so with a handful of scopes it read every scope's rows to search
-- one (the whole table; with 5 LoCoMo conversations, 5x the scope); for the small-scope
-- statement (%(enable_nestloop)s 'off'; NULL: as it is), no nested loops where another join
-- exists: a generic plan made before the tables' first ANALYZE estimates each CTE at a row or
-- two, and joined the candidates to their entity hits in a loop (candidates x hits: 20,000
-- comparisons at 400 memories), which hash joins do in one pass (its only loops are LATERAL);
-- and (pgvector >= 0.8) iterative HNSW scans, with ef_search at the semantic leg's over-fetch.
SELECT set_config('plan_cache_mode', %(plan_cache_mode)s::text, true),
       set_config('jit', 'off', true),
       set_config('enable_seqscan', 'off', true),
       set_config('enable_nestloop',
                  coalesce(%(enable_nestloop)s::text, current_setting('enable_nestloop')), true),
       set_config('hnsw.iterative_scan', 'relaxed_order', true),
       set_config('hnsw.ef_search', %(ef_search)s::text, true)

-- name: search_settings_exact
-- search_settings for pgvector < 0.8, which has no iterative scans (the search scans the scope
-- exactly).
SELECT set_config('plan_cache_mode', %(plan_cache_mode)s::text, true),
       set_config('jit', 'off', true),
       set_config('enable_seqscan', 'off', true),
       set_config('enable_nestloop',
                  coalesce(%(enable_nestloop)s::text, current_setting('enable_nestloop')), true)

-- name: search_settings_citus
-- search_settings on Citus, whose worker runs the search statement and never sees what
-- set_config set on the coordinator: SET LOCAL commands, which Citus copies to the worker when
-- they are made in a transaction block (citus.propagate_set_commands = 'local'; the search
-- then runs in one, see pgmem.connection.Connector.batch). Custom plans: the only ones Citus
-- routes. One statement a line (each is sent on its own).
SET LOCAL citus.propagate_set_commands = 'local';
SET LOCAL plan_cache_mode = force_custom_plan;
SET LOCAL jit = off;
SET LOCAL enable_seqscan = off;
SET LOCAL hnsw.iterative_scan = relaxed_order;
SET LOCAL hnsw.ef_search = {ef_search}

-- name: search_settings_citus_exact
-- search_settings_citus for pgvector < 0.8 (no iterative scans).
SET LOCAL citus.propagate_set_commands = 'local';
SET LOCAL plan_cache_mode = force_custom_plan;
SET LOCAL jit = off;
SET LOCAL enable_seqscan = off

-- name: keep_caller_settings
-- In the caller's transaction, before search_settings: what the caller's transaction runs
-- with, kept in the transaction's own setting pgmem.caller_settings (a JSON object, NULL for a
-- setting not defined yet: pgvector's before its library loads, Citus's without Citus).
-- search_settings are local to the caller's transaction, and the savepoint the search runs in is
-- released, not rolled back (see pgmem.connection.BATCH_RELEASE): without this, the caller's
-- own later statements would run without sequential scans, JIT or custom plans until COMMIT.
SELECT set_config('pgmem.caller_settings', json_build_object(
           'plan_cache_mode', current_setting('plan_cache_mode'),
           'jit', current_setting('jit'),
           'enable_seqscan', current_setting('enable_seqscan'),
           'enable_nestloop', current_setting('enable_nestloop'),
           'hnsw.iterative_scan', current_setting('hnsw.iterative_scan', true),
           'hnsw.ef_search', current_setting('hnsw.ef_search', true),
           'citus.propagate_set_commands',
           current_setting('citus.propagate_set_commands', true))::text, true)

-- name: restore_caller_settings
-- After the search statement: the caller's settings back (keep_caller_settings). A setting the
-- caller's transaction did not have but the search defined (pgvector's, loaded by the search)
-- goes back to the session's value; one that exists in neither is left undefined. On Citus,
-- the worker keeps search_settings_citus's values until the caller's transaction ends.
SELECT set_config(s.key, s.value, true)
  FROM json_each_text(current_setting('pgmem.caller_settings')::json) s
 WHERE s.value IS NOT NULL OR current_setting(s.key, true) IS NOT NULL

-- name: pgvector_version
SELECT extversion FROM pg_extension WHERE extname = 'vector'

-- name: schema_tables
-- Whether pgmem's schema exists, and is at revision 0004 or later (the model on record).
SELECT to_regclass(%(memories_table)s) IS NOT NULL AS memories,
       to_regclass(%(models_table)s) IS NOT NULL AS embedding_models

-- name: embedding_models
-- The model of the stored vectors (role 'current') and of a re-embedding in progress ('next'),
-- and the semantic scale learned for a model (revision 0010; read through to_jsonb so that a
-- schema before it reads as having none).
SELECT e.role, e.model, e.dim, e.storage,
       to_jsonb(e) ->> 'scale_model' AS scale_model,
       (to_jsonb(e) ->> 'scale_lo')::float8 AS scale_lo,
       (to_jsonb(e) ->> 'scale_hi')::float8 AS scale_hi
  FROM {schema}.embedding_models e

-- name: claim_embedding_model
-- The first write into a schema whose model is not on record records its embedder's -- unless
-- another write is doing so (its row lock is skipped, not waited for: the claim of a write in a
-- long transaction must not stall every other writer).
UPDATE {schema}.embedding_models e
   SET model = %(model)s, updated_at = now()
 WHERE e.role IN (SELECT u.role
                    FROM {schema}.embedding_models u
                   WHERE u.role = 'current' AND u.model IS NULL
                     FOR UPDATE SKIP LOCKED)

-- name: write_next_memories
-- During a re-embedding (pgmem.reembed, sql/reembed.sql: row 'next' of embedding_models, which
-- this write's transaction read, and column embedding_next): the pending model's vectors of the
-- memories this write stored, each kept only where the memory still has the text embedded
-- (content_hash) and no vector of that model yet. A row another transaction holds is skipped,
-- not waited for (the re-embedding embeds it): the write never waits here.
UPDATE {schema}.memories m
   SET embedding_next = v.embedding
  FROM unnest(%(ids)s::uuid[], %(content_hashes)s::text[], %(embeddings)b::vector[])
       AS v(id, content_hash, embedding)
 WHERE m.tenant = %(tenant)s AND m.id = v.id AND m.content_hash = v.content_hash
   AND m.id IN (SELECT l.id
                  FROM {schema}.memories l
                 WHERE l.tenant = %(tenant)s AND l.id = ANY(%(ids)s::uuid[])
                   AND l.embedding_next IS NULL
                   FOR UPDATE SKIP LOCKED)

-- name: write_next_entities
-- The same for the entities a write linked, by their stored (normalised) name, as the
-- re-embedding embeds them.
UPDATE {schema}.entities e
   SET embedding_next = v.embedding
  FROM unnest(%(names)s::text[], %(embeddings)b::vector[]) AS v(name, embedding)
 WHERE e.tenant = %(tenant)s AND e.name = v.name
   AND e.id IN (SELECT l.id
                  FROM {schema}.entities l
                 WHERE l.tenant = %(tenant)s AND l.name = ANY(%(names)s::text[])
                   AND l.embedding_next IS NULL
                   FOR UPDATE SKIP LOCKED)

-- name: explain_prepare
-- explain_search: the search statement prepared under a name of its own (its parameters
-- numbered), so that EXPLAIN shows the generic plan a search runs with; EXPLAIN of a statement
-- sent with its parameters would show a plan made for their values.
PREPARE {name} AS {statement}

-- name: explain_execute
EXPLAIN (FORMAT JSON, ANALYZE {analyze}) EXECUTE {name} ({values})

-- name: explain_inline
-- explain_search on Citus: the statement with its values inlined (the custom plan its
-- searches run with there).
EXPLAIN (FORMAT JSON, ANALYZE {analyze}) {statement}

-- name: explain_deallocate
DEALLOCATE {name}

-- name: lock_contents_citus
-- On Citus: lock_contents's locks taken on the tenant's worker, one per key (take_locks,
-- which reads tenant_secrets, cannot run inside a statement Citus routes to a shard).
-- The locks of an add, taken before insert_memories as a statement of its own (so that its
-- snapshot, taken after they are granted, sees whatever the previous holder committed; a
-- REPEATABLE READ transaction would not), all in one pass in (class, key) order so that
-- concurrent writers cannot deadlock:
-- * with `dedupe`, per distinct (tenant, scope, content hash): exact duplicates have no unique
--   index to lean on, so adds of one text to one scope are serialised;
-- * per entity name of the batch (see lock_linked_entities): every writer of entity rows takes
--   these first, so that no writer waits for an entity row while holding another.
-- Every key holds the tenant's secret salt (tenant_secrets; NULL without a row), so that a role
-- that cannot read it cannot take, and so hold, another tenant's locks.
WITH salt AS MATERIALIZED (
    SELECT (SELECT s.lock_salt FROM {schema}.tenant_secrets s
             WHERE s.tenant = %(tenant)s::text) AS salt
)
SELECT pg_advisory_xact_lock(k.class, k.key)
  FROM (SELECT DISTINCT 1 AS rank, hashtext('pgmem.content') AS class,
                        hashtext(jsonb_build_array(%(tenant)s::text, x.salt, i.user_id,
                                                   i.agent_id, i.run_id, i.content_hash)::text)
                            AS key
          FROM unnest(%(user_ids)s::text[], %(agent_ids)s::text[], %(run_ids)s::text[],
                      %(content_hashes)s::text[]) AS i(user_id, agent_id, run_id, content_hash)
         CROSS JOIN salt x
         WHERE %(dedupe)s::boolean
        UNION
        SELECT DISTINCT 2, hashtext('pgmem.entity'),
                        hashtext(jsonb_build_array(%(tenant)s::text, x.salt, n.name)::text)
          FROM unnest(%(entity_names)s::text[]) AS n(name)
         CROSS JOIN salt x
       ) k
 ORDER BY k.rank, k.key

-- name: lock_update_content_citus
-- On Citus: lock_update_content's locks taken on the tenant's worker, one per key (take_locks,
-- which reads tenant_secrets, cannot run inside a statement Citus routes to a shard).
-- The duplicate lock of an update's new text: the lock lock_contents takes for an add of that
-- text to the memory's scope, so that an add or another update of the same text to the scope
-- waits for this one. A statement of its own, before update_duplicate, whose snapshot then sees
-- whatever the previous holder committed. The key holds the tenant's salt as lock_contents' does.
SELECT pg_advisory_xact_lock(hashtext('pgmem.content'),
                             hashtext(jsonb_build_array(%(tenant)s::text,
                                                        (SELECT s.lock_salt
                                                           FROM {schema}.tenant_secrets s
                                                          WHERE s.tenant = %(tenant)s::text),
                                                        m.user_id, m.agent_id, m.run_id,
                                                        %(content_hash)s::text)::text))
  FROM {schema}.memories m
 WHERE m.tenant = %(tenant)s AND m.id = %(id)s::uuid

-- name: lock_linked_entities_citus
-- On Citus: lock_linked_entities's locks taken on the tenant's worker, one per key (take_locks,
-- which reads tenant_secrets, cannot run inside a statement Citus routes to a shard).
-- The entity-name locks of an update or delete: the names of the entities linked to memories
-- `ids`, and the new text's `entity_names` (empty for a delete). One transaction-scoped
-- advisory lock per (tenant, name) -- keyed with the tenant's salt --, the same lock
-- lock_contents takes for an add, all taken in
-- one pass in key order. Row locks taken in two steps (the old entities here, the new ones
-- during the change) let an add holding a new entity wait for an old one: a deadlock.
-- Sent before the change as a statement of its own, because deleting an entity once no link is
-- left is a check-then-act: with the locks held, a writer linking one of these entities waits
-- for the change to commit (and then re-creates the entity if it was deleted), and the change's
-- snapshot sees every link committed before the locks.
SELECT pg_advisory_xact_lock(hashtext('pgmem.entity'), k.key)
  FROM (SELECT DISTINCT hashtext(jsonb_build_array(
                            %(tenant)s::text,
                            (SELECT s.lock_salt FROM {schema}.tenant_secrets s
                              WHERE s.tenant = %(tenant)s::text),
                            n.name)::text) AS key
          FROM (SELECT e.name
                  FROM {schema}.entities e
                 WHERE e.tenant = %(tenant)s
                   AND e.id IN (SELECT me.entity_id
                                  FROM {schema}.memory_entities me
                                 WHERE me.tenant = %(tenant)s
                                   AND me.memory_id = ANY(%(ids)s::uuid[]))
                UNION
                SELECT unnest(%(entity_names)s::text[])) n(name)
       ) k
 ORDER BY k.key
