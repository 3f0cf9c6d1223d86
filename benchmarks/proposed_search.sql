-- A proposed `search` statement, measured beside sql/queries.sql's by `--proposed` in
-- benchmarks/latency.py and benchmarks/scale.py: the same parameters, the same columns and, up
-- to float rounding and HNSW's approximate order, the same rows. Not used by pgmem.
--
-- What changes, and why (see docs/benchmarks.md):
-- * Keyword leg: the scope's documents matching the OR query are read once (keyword_docs).
--   A document holding a query lexeme matches the OR query, so each lexeme's document frequency
--   within the scope is counted over those documents (keyword_tf) -- instead of one
--   memories @@ lexeme probe per lexeme, which the planner also runs twice (the subquery's df
--   is referenced twice in the idf expression and gets pulled up, hence two SubPlans).
-- * Entity leg: driven from the scope. The scope's links are read once (scope_links: the
--   scope's memories, then their links by primary key); each query entity is compared exactly
--   with the entities they reach, and the matched entities' links come from scope_links. The
--   current leg reads every link of a matched entity across the tenant
--   (memory_entities_entity_idx) and probes an EXISTS per HNSW candidate entity: both grow with
--   the table, not with the scope, for the common names that queries mention. Exact distances
--   over the scope's entities need no iterative scan, so old pgvector takes the same path.
WITH
semantic AS MATERIALIZED (
    (SELECT m.id
       FROM {schema}.memories m
      WHERE NOT %(exact_scan)s::boolean AND {scope}
      ORDER BY m.embedding <=> %(embedding)s::vector
      LIMIT %(semantic_limit)s)
    UNION ALL
    (SELECT s.id
       FROM (SELECT m.id, m.embedding
               FROM {schema}.memories m
              WHERE %(exact_scan)s::boolean AND {scope}
             OFFSET 0) s
      ORDER BY s.embedding <=> %(embedding)s::vector
      LIMIT %(semantic_limit)s)
),
scope_stats AS (
    SELECT count(*)::float8 AS n_docs, coalesce(avg(m.lexeme_count), 0)::float8 AS avg_len
      FROM {schema}.memories m
     WHERE %(tsquery)s::tsquery IS NOT NULL AND {scope}
),
keyword_docs AS MATERIALIZED (
    SELECT m.id, m.lexemes, m.lexeme_count
      FROM {schema}.memories m
     WHERE %(tsquery)s::tsquery IS NOT NULL AND m.lexemes @@ %(tsquery)s::tsquery AND {scope}
),
keyword_tf AS MATERIALIZED (
    SELECT k.id, k.lexeme_count, u.lexeme, cardinality(u.positions)::float8 AS n
      FROM keyword_docs k
     CROSS JOIN LATERAL unnest(k.lexemes) AS u(lexeme, positions, weights)
     WHERE u.lexeme = ANY (%(lexemes)s::text[])
),
terms AS MATERIALIZED (
    SELECT f.lexeme, ln(1 + (st.n_docs - count(*) + 0.5) / (count(*) + 0.5)) AS idf
      FROM keyword_tf f
     CROSS JOIN scope_stats st
     GROUP BY f.lexeme, st.n_docs
),
keyword_scored AS MATERIALIZED (
    SELECT k.id,
           ts_rank_cd(k.lexemes, %(tsquery)s::tsquery) AS rank_cd,
           b.bm25
      FROM keyword_docs k
      JOIN (SELECT f.id,
                   sum(t.idf * f.n * (%(bm25_k1)s + 1)
                       / (f.n + %(bm25_k1)s * (1 - %(bm25_b)s + %(bm25_b)s * f.lexeme_count
                                                 / greatest(st.avg_len, 1)))) AS bm25
              FROM keyword_tf f
              JOIN terms t ON t.lexeme = f.lexeme
             CROSS JOIN scope_stats st
             GROUP BY f.id) b ON b.id = k.id
),
keyword AS (
    SELECT k.id
      FROM keyword_scored k
     ORDER BY CASE WHEN %(keyword_score)s = 'bm25' THEN k.bm25 ELSE k.rank_cd END DESC
     LIMIT %(keyword_limit)s
),
scope_links AS MATERIALIZED (
    SELECT me.memory_id, me.entity_id
      FROM {schema}.memories m
      JOIN {schema}.memory_entities me ON me.tenant = m.tenant AND me.memory_id = m.id
     WHERE cardinality(%(entity_embeddings)s::vector[]) > 0 AND {scope}
),
entity_match AS (
    SELECT q.n AS query_entity, e.id AS entity_id, e.name,
           1 - (e.embedding <=> q.embedding) AS similarity
      FROM unnest(%(entity_embeddings)s::vector[]) WITH ORDINALITY AS q(embedding, n)
     CROSS JOIN LATERAL (
            SELECT x.id, x.name, x.embedding
              FROM (SELECT e.id, e.name, e.embedding
                      FROM {schema}.entities e
                     WHERE e.tenant = %(tenant)s
                       AND e.id IN (SELECT l.entity_id FROM scope_links l)
                    OFFSET 0) x  -- exact distances: no HNSW scan over the tenant's entities
             ORDER BY x.embedding <=> q.embedding
             LIMIT %(entity_neighbours)s) e
     WHERE 1 - (e.embedding <=> q.embedding) >= %(entity_min_similarity)s
),
entity_links AS MATERIALIZED (
    SELECT l.memory_id AS id, em.query_entity, em.entity_id, em.name, em.similarity
      FROM entity_match em
      JOIN scope_links l ON l.entity_id = em.entity_id
),
entity_spread AS MATERIALIZED (
    SELECT m.query_entity, m.entity_id,
           (SELECT count(DISTINCT l.id)
              FROM entity_links l
             WHERE l.query_entity = m.query_entity AND l.similarity >= m.similarity) AS spread
      FROM (SELECT DISTINCT query_entity, entity_id, similarity FROM entity_links) m
),
entity_hits AS (
    SELECT l.id,
           jsonb_agg(jsonb_build_object('name', l.name, 'similarity', l.similarity,
                                        'spread', s.spread)) AS hits,
           max(l.similarity / (1 + %(spread_decay)s * (s.spread - 1) ^ 2)) AS rank
      FROM entity_links l
      JOIN entity_spread s USING (query_entity, entity_id)
     GROUP BY l.id
),
entity AS (
    SELECT h.id FROM entity_hits h ORDER BY h.rank DESC LIMIT %(entity_limit)s
),
candidates AS (
    SELECT id, 'semantic' AS leg FROM semantic
    UNION ALL SELECT id, 'keyword' FROM keyword
    UNION ALL SELECT id, 'entity' FROM entity
)
SELECT m.id, m.user_id, m.agent_id, m.run_id, m.text, m.metadata, m.created_at, m.updated_at,
       1 - (m.embedding <=> %(embedding)s::vector) AS semantic,
       k.bm25, k.rank_cd, h.hits AS entity_hits, c.legs
  FROM (SELECT id, array_agg(leg ORDER BY leg) AS legs FROM candidates GROUP BY id) c
  JOIN {schema}.memories m ON m.tenant = %(tenant)s AND m.id = c.id
  LEFT JOIN keyword_scored k ON k.id = c.id
  LEFT JOIN entity_hits h ON h.id = c.id
