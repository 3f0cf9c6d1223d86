-- pgmem's `search` statement as of commit f047e7a, before the keyword and entity legs were
-- driven from the scope (2987f9d). Not used by pgmem: kept so that the change can be measured
-- beside the current statement, in the same run, on the same table:
--   python -m benchmarks.latency --compare benchmarks/search_f047e7a.sql
--   python -m benchmarks.scale --compare benchmarks/search_f047e7a.sql
-- It takes one parameter the current pipeline no longer sends, lexeme_queries (each query lexeme
-- as a quoted tsquery); the benchmarks derive it from lexemes.
-- Steps 2-7 of the pipeline in one statement: the three legs, their union, and every
-- candidate's exact cosine similarity, keyword scores and entity hits. Python fuses.
WITH
-- Semantic leg. The HNSW index serves the first branch (iterative scans keep a filtered scope
-- from under-returning on pgvector >= 0.8); the second is an exact scan over the scope, for
-- older pgvector. %(exact_scan)s picks one; the other is pruned at plan time.
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
-- Keyword leg: an OR query of the query's lemmas, scored by ts_rank_cd and by BM25 from the
-- stored tsvector (term frequency, document length, document frequency within the scope).
scope_stats AS (
    SELECT count(*)::float8 AS n_docs, coalesce(avg(m.lexeme_count), 0)::float8 AS avg_len
      FROM {schema}.memories m
     WHERE %(tsquery)s::tsquery IS NOT NULL AND {scope}
),
terms AS MATERIALIZED (
    SELECT t.lexeme,
           ln(1 + (st.n_docs - t.df + 0.5) / (t.df + 0.5)) AS idf
      FROM (SELECT q.lexeme,
                   (SELECT count(*)
                      FROM {schema}.memories m
                     WHERE m.lexemes @@ q.lexeme_query AND {scope}) AS df
              FROM unnest(%(lexemes)s::text[], %(lexeme_queries)s::tsquery[])
                   AS q(lexeme, lexeme_query)) t
     CROSS JOIN scope_stats st
),
keyword_scored AS MATERIALIZED (
    SELECT m.id,
           ts_rank_cd(m.lexemes, %(tsquery)s::tsquery) AS rank_cd,
           (SELECT sum(t.idf * tf.n * (%(bm25_k1)s + 1)
                       / (tf.n + %(bm25_k1)s * (1 - %(bm25_b)s + %(bm25_b)s * m.lexeme_count
                                                 / greatest(st.avg_len, 1))))
              FROM unnest(m.lexemes) AS u(lexeme, positions, weights)
              JOIN terms t ON t.lexeme = u.lexeme
             CROSS JOIN LATERAL (SELECT cardinality(u.positions)::float8 AS n) tf
             CROSS JOIN scope_stats st) AS bm25
      FROM {schema}.memories m
     WHERE m.lexemes @@ %(tsquery)s::tsquery AND {scope}
),
keyword AS (
    SELECT k.id
      FROM keyword_scored k
     ORDER BY CASE WHEN %(keyword_score)s = 'bm25' THEN k.bm25 ELSE k.rank_cd END DESC
     LIMIT %(keyword_limit)s
),
-- Entity leg: for each query entity, the nearest known entities that memories of the scope
-- link to (similarity >= the minimum; iterative scans keep the scope filter from starving the
-- index scan), and their links to memories of the scope.
entity_match AS (
    SELECT q.n AS query_entity, e.id AS entity_id, e.name,
           1 - (e.embedding <=> q.embedding) AS similarity
      FROM unnest(%(entity_embeddings)s::vector[]) WITH ORDINALITY AS q(embedding, n)
     CROSS JOIN LATERAL (
            -- As in the semantic leg: the HNSW index, or an exact scan on old pgvector.
            (SELECT e.id, e.name, e.embedding
               FROM {schema}.entities e
              WHERE NOT %(exact_scan)s::boolean AND e.tenant = %(tenant)s
                AND EXISTS (SELECT 1
                              FROM {schema}.memory_entities me
                              JOIN {schema}.memories m
                                ON m.tenant = me.tenant AND m.id = me.memory_id
                             WHERE me.tenant = e.tenant AND me.entity_id = e.id AND {scope})
              ORDER BY e.embedding <=> q.embedding
              LIMIT %(entity_neighbours)s)
            UNION ALL
            (SELECT x.id, x.name, x.embedding
               FROM (SELECT e.id, e.name, e.embedding
                       FROM {schema}.entities e
                      WHERE %(exact_scan)s::boolean AND e.tenant = %(tenant)s
                        AND EXISTS (SELECT 1
                                      FROM {schema}.memory_entities me
                                      JOIN {schema}.memories m
                                        ON m.tenant = me.tenant AND m.id = me.memory_id
                                     WHERE me.tenant = e.tenant AND me.entity_id = e.id
                                       AND {scope})
                     OFFSET 0) x
              ORDER BY x.embedding <=> q.embedding
              LIMIT %(entity_neighbours)s)
          ) e
     WHERE 1 - (e.embedding <=> q.embedding) >= %(entity_min_similarity)s
),
entity_links AS MATERIALIZED (
    SELECT me.memory_id AS id, em.query_entity, em.entity_id, em.name, em.similarity
      FROM entity_match em
      JOIN {schema}.memory_entities me
        ON me.tenant = %(tenant)s AND me.entity_id = em.entity_id
      JOIN {schema}.memories m
        ON m.tenant = me.tenant AND m.id = me.memory_id
     WHERE {scope}
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
