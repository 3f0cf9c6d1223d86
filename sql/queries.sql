-- pgmem's statements, one named block each (`-- name: <name>`), loaded once by pgmem/queries.py.
-- {schema} is pgmem's schema (an identifier), {scope} the scope-and-filter condition on the
-- memory alias `m` (the block `scope` below plus the compiled metadata filter). Every value is
-- a bound, cast parameter.

-- name: scope
-- The rows a call may see: one tenant, the given scope columns, the metadata filter.
m.tenant = %(tenant)s
AND (%(user_id)s::text IS NULL OR m.user_id = %(user_id)s::text)
AND (%(agent_id)s::text IS NULL OR m.agent_id = %(agent_id)s::text)
AND (%(run_id)s::text IS NULL OR m.run_id = %(run_id)s::text)
AND {filters}

-- name: search
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
terms AS (
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
-- Entity leg: the nearest known entities to each query entity (similarity >= the minimum), their
-- links to memories in the scope, and each entity's spread counted over those links.
entity_match AS (
    SELECT e.id AS entity_id, e.name, max(e.similarity) AS similarity
      FROM unnest(%(entity_embeddings)s::vector[]) AS q(embedding)
     CROSS JOIN LATERAL (
            SELECT e.id, e.name, 1 - (e.embedding <=> q.embedding) AS similarity
              FROM {schema}.entities e
             WHERE e.tenant = %(tenant)s
             ORDER BY e.embedding <=> q.embedding
             LIMIT %(entity_neighbours)s) e
     WHERE e.similarity >= %(entity_min_similarity)s
     GROUP BY e.id, e.name
),
entity_links AS MATERIALIZED (
    SELECT me.memory_id AS id, em.entity_id, em.name, em.similarity
      FROM entity_match em
      JOIN {schema}.memory_entities me
        ON me.tenant = %(tenant)s AND me.entity_id = em.entity_id
      JOIN {schema}.memories m
        ON m.tenant = me.tenant AND m.id = me.memory_id
     WHERE {scope}
),
entity_spread AS (
    SELECT l.entity_id, count(*) AS spread
      FROM entity_links l
     GROUP BY l.entity_id
),
entity_hits AS (
    SELECT l.id,
           jsonb_agg(jsonb_build_object('name', l.name, 'similarity', l.similarity,
                                        'spread', s.spread)) AS hits,
           max(l.similarity / (1 + %(spread_decay)s * (s.spread - 1) ^ 2)) AS rank
      FROM entity_links l
      JOIN entity_spread s USING (entity_id)
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

-- name: insert_memory
-- A memory, its entities (upserted; sorted so concurrent writers lock in the same order), its
-- links and its ADD event, in one statement.
WITH memory AS (
    INSERT INTO {schema}.memories
           (tenant, user_id, agent_id, run_id, text, content_hash, metadata,
            embedding, lexemes, lexeme_count)
    VALUES (%(tenant)s, %(user_id)s, %(agent_id)s, %(run_id)s, %(text)s, %(content_hash)s,
            %(metadata)s::jsonb, %(embedding)s::vector, %(lexemes)s::tsvector, %(lexeme_count)s)
    RETURNING tenant, id, created_at, updated_at
),
entity AS (
    INSERT INTO {schema}.entities AS e (tenant, name, label, embedding)
    SELECT %(tenant)s, n.name, n.label, n.embedding
      FROM unnest(%(entity_names)s::text[], %(entity_labels)s::text[],
                  %(entity_embeddings)s::vector[]) AS n(name, label, embedding)
     ORDER BY n.name
        ON CONFLICT (tenant, name) DO UPDATE SET name = EXCLUDED.name
    RETURNING e.id
),
link AS (
    INSERT INTO {schema}.memory_entities (tenant, memory_id, entity_id)
    SELECT memory.tenant, memory.id, entity.id FROM memory CROSS JOIN entity
),
event AS (
    INSERT INTO {schema}.history (tenant, memory_id, event, new_text)
    SELECT memory.tenant, memory.id, 'ADD', %(text)s FROM memory
)
SELECT id, created_at, updated_at FROM memory

-- name: pgvector_version
SELECT extversion FROM pg_extension WHERE extname = 'vector'

-- name: schema_dimension
SELECT a.atttypmod AS dim
  FROM pg_attribute a
 WHERE a.attrelid = to_regclass(%(memories_table)s) AND a.attname = 'embedding'
