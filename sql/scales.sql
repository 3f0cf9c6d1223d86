-- The semantic scale of the model on record (pgmem.scales, pgmem.semantic_scale).

-- name: scale_model
-- The model on record, and whether a re-embedding is in progress.
SELECT e.model, EXISTS (SELECT FROM {schema}.embedding_models n WHERE n.role = 'next') AS pending
  FROM {schema}.embedding_models e
 WHERE e.role = 'current'

-- name: scale_sample
-- Up to %(limit)s memories' vectors (every tenant's: the model is the schema's), as arrays of
-- floats; by id, which pgmem draws at random (uuid4), so a sample of the rows.
SELECT m.embedding::vector::real[] AS embedding
  FROM {schema}.memories m
 WHERE m.embedding IS NOT NULL
 ORDER BY m.id
 LIMIT %(limit)s

-- name: record_scale
-- The scale learned for the model on record, unless the model changed meanwhile (NULL lo/hi:
-- no scale).
UPDATE {schema}.embedding_models e
   SET scale_model = CASE WHEN %(lo)s::float8 IS NULL THEN NULL ELSE %(model)s::text END,
       scale_lo = %(lo)s::float8, scale_hi = %(hi)s::float8, updated_at = now()
 WHERE e.role = 'current' AND e.model = %(model)s::text
