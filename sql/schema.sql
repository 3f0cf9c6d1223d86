-- The pgmem schema as it stands at the newest migration, written to be read.
-- Created here with the defaults: schema `pgmem`, embedding dimension 384 stored as `vector`
-- (above 2,000 dimensions `halfvec`, with `halfvec_cosine_ops` for the HNSW index). Alembic
-- (migrations/) is what creates it in a database; tests/test_migrations.py checks that this file
-- and the migrations produce the same catalog.
--
-- Every table carries `tenant`, the distribution column for Citus (docs/scaling.md): it leads
-- every primary key, unique constraint and foreign key, and every query filters on it.

CREATE EXTENSION IF NOT EXISTS vector;
CREATE SCHEMA IF NOT EXISTS pgmem;

-- One memory: a short text in a scope (user, agent and/or run).
CREATE TABLE pgmem.memories (
    tenant        text        NOT NULL DEFAULT 'default',
    id            uuid        NOT NULL DEFAULT gen_random_uuid(),
    user_id       text,
    agent_id      text,
    run_id        text,
    text          text        NOT NULL,
    content_hash  text        NOT NULL,             -- sha256 of the text, hex
    metadata      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    embedding     vector(384) NOT NULL,
    lexemes       tsvector    NOT NULL,             -- lemmas with their positions
    lexeme_count  integer     NOT NULL,             -- document length for the BM25 score
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    ts_config     text        NOT NULL DEFAULT 'english', -- text search configuration of lexemes
    -- A store item (pgmem.langgraph) instead of a scoped memory: its namespace (a path of
    -- labels, compared byte by byte) and its key in it; its time to live, if any.
    namespace     text[]      COLLATE "C",
    key           text,
    ttl_minutes   double precision,
    expires_at    timestamptz,
    -- Where an imported memory came from (pgmem.importers; NULL for every other memory): no
    -- call of pgmem's API writes it. A Mem0 import's: {"importer": "mem0", "source",
    -- "collection", "version", "updated_at"}.
    origin        jsonb,
    CONSTRAINT memories_pkey PRIMARY KEY (tenant, id),
    CONSTRAINT memories_scope_check
        CHECK (user_id IS NOT NULL OR agent_id IS NOT NULL OR run_id IS NOT NULL
               OR namespace IS NOT NULL),
    CONSTRAINT memories_item_check CHECK ((namespace IS NULL) = (key IS NULL))
);
-- Vectors stay in the row, not TOASTed out of line (the planner does not count reading TOAST);
-- so do the text, lexemes and metadata of a row up to about a page (8160 bytes): a search reads
-- them for every memory of a small scope, and an out-of-line value costs an index probe more.
ALTER TABLE pgmem.memories ALTER COLUMN embedding SET STORAGE MAIN;
ALTER TABLE pgmem.memories SET (toast_tuple_target = 8160);
CREATE INDEX memories_embedding_idx ON pgmem.memories USING hnsw (embedding vector_cosine_ops);
CREATE INDEX memories_lexemes_idx ON pgmem.memories USING gin (lexemes);
-- A scope's memories by scope id, in get_all's page order (created_at, id): a page is one
-- index range from its cursor, never a sort of the scope. Each memory's length is included
-- (0011): a large scope's BM25 statistics (its size and average length) are one index-only
-- range, not a read of its every row.
CREATE INDEX memories_user_idx ON pgmem.memories (tenant, user_id, created_at, id)
    INCLUDE (lexeme_count);
CREATE INDEX memories_agent_idx ON pgmem.memories (tenant, agent_id, created_at, id)
    INCLUDE (lexeme_count);
CREATE INDEX memories_run_idx ON pgmem.memories (tenant, run_id, created_at, id)
    INCLUDE (lexeme_count);
CREATE INDEX memories_content_hash_idx ON pgmem.memories (tenant, content_hash);
-- A store item by namespace and key; a namespace prefix is one range of it.
CREATE UNIQUE INDEX memories_item_key ON pgmem.memories (tenant, namespace, key)
    WHERE namespace IS NOT NULL;
CREATE INDEX memories_expires_idx ON pgmem.memories (tenant, expires_at)
    WHERE expires_at IS NOT NULL;

-- A named thing that memories mention, deduplicated by its normalised name. No HNSW index on
-- its embedding: a search compares the query's entities with those its scope's links reach,
-- fetched by key.
CREATE TABLE pgmem.entities (
    tenant      text        NOT NULL DEFAULT 'default',
    id          uuid        NOT NULL DEFAULT gen_random_uuid(),
    name        text        NOT NULL,               -- normalised: case-folded, spaces collapsed
    label       text        NOT NULL,               -- spaCy label, PROPN or QUOTED
    embedding   vector(384) NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT entities_pkey PRIMARY KEY (tenant, id),
    CONSTRAINT entities_name_key UNIQUE (tenant, name)
);
ALTER TABLE pgmem.entities ALTER COLUMN embedding SET STORAGE MAIN;

-- Which memory mentions which entity. Spread counts come from here by aggregate. Each link
-- carries its memory's scope ids (which never change), so that a search reads the links of its
-- scope in one index range instead of one probe per memory.
CREATE TABLE pgmem.memory_entities (
    tenant     text NOT NULL DEFAULT 'default',
    memory_id  uuid NOT NULL,
    entity_id  uuid NOT NULL,
    user_id    text,
    agent_id   text,
    run_id     text,
    namespace  text[] COLLATE "C",
    CONSTRAINT memory_entities_pkey PRIMARY KEY (tenant, memory_id, entity_id),
    CONSTRAINT memory_entities_memory_fkey FOREIGN KEY (tenant, memory_id)
        REFERENCES pgmem.memories (tenant, id) ON DELETE CASCADE,
    CONSTRAINT memory_entities_entity_fkey FOREIGN KEY (tenant, entity_id)
        REFERENCES pgmem.entities (tenant, id) ON DELETE CASCADE
);
CREATE INDEX memory_entities_entity_idx ON pgmem.memory_entities (tenant, entity_id);
CREATE INDEX memory_entities_user_idx
    ON pgmem.memory_entities (tenant, user_id, memory_id, entity_id);
CREATE INDEX memory_entities_agent_idx
    ON pgmem.memory_entities (tenant, agent_id, memory_id, entity_id);
CREATE INDEX memory_entities_run_idx
    ON pgmem.memory_entities (tenant, run_id, memory_id, entity_id);
CREATE INDEX memory_entities_namespace_idx
    ON pgmem.memory_entities (tenant, namespace, memory_id, entity_id)
    WHERE namespace IS NOT NULL;

-- Every change to a memory, written in the transaction that makes it. No foreign key: the
-- history of a deleted memory stays.
CREATE TABLE pgmem.history (
    tenant      text        NOT NULL DEFAULT 'default',
    id          bigint      GENERATED ALWAYS AS IDENTITY,
    memory_id   uuid        NOT NULL,
    event       text        NOT NULL,
    old_text    text,
    new_text    text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT history_pkey PRIMARY KEY (tenant, id),
    CONSTRAINT history_event_check CHECK (event IN ('ADD', 'UPDATE', 'DELETE'))
);
CREATE INDEX history_memory_idx ON pgmem.history (tenant, memory_id, id);

-- The embedding model the vectors were made with (row 'current': model name -- NULL until the
-- first write or migrate(model=...) records it --, dimension, storage), and while pgmem.reembed
-- moves them to another model, that one (row 'next'). Not per tenant: the columns' type is the
-- schema's. Under Citus a reference table. The semantic scale learned for a model (revision
-- 0010, pgmem.semantic_scale): it counts while scale_model is the row's model.
CREATE TABLE pgmem.embedding_models (
    role        text        NOT NULL,
    model       text,
    dim         integer     NOT NULL,
    storage     text        NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    scale_model text,
    scale_lo    double precision,
    scale_hi    double precision,
    CONSTRAINT embedding_models_pkey PRIMARY KEY (role),
    CONSTRAINT embedding_models_role_check CHECK (role IN ('current', 'next')),
    CONSTRAINT embedding_models_storage_check CHECK (storage IN ('vector', 'halfvec')),
    CONSTRAINT embedding_models_scale_check
        CHECK (scale_model IS NULL OR (scale_lo IS NOT NULL AND scale_hi IS NOT NULL
               AND scale_lo < scale_hi))
);
INSERT INTO pgmem.embedding_models (role, dim, storage) VALUES ('current', 384, 'vector');

-- A random salt per tenant in the keys of pgmem's advisory locks (take_locks below), so that a
-- tenant role that cannot read another tenant's row (row-level security, docs/security.md)
-- cannot take that tenant's locks. The row of tenant '' (no role can be named so) holds the
-- schema's secret, from which every tenant's salt derives (sha256 of the secret, a newline and
-- the tenant): `pgmem grant-tenant` writes a tenant role's row, and the owner's own tenants
-- need none.
CREATE TABLE pgmem.tenant_secrets (
    tenant     text NOT NULL,
    lock_salt  text NOT NULL DEFAULT (gen_random_uuid()::text || gen_random_uuid()::text),
    CONSTRAINT tenant_secrets_pkey PRIMARY KEY (tenant)
);
INSERT INTO pgmem.tenant_secrets (tenant) VALUES ('');

-- pgmem's advisory locks, the only ones a tenant role may take (`pgmem grant-tenant` revokes
-- the pg_advisory_* functions from it): transaction-scoped, of one kind ('content': an add's
-- duplicate check; 'item': a store item's key; 'entity': an entity name), keyed by the tenant's
-- salt (derived from the schema's secret), which a tenant role must show (it reads only its
-- own); other roles may leave it out. Each key falls in one of
-- 256 buckets per tenant and kind, and a bucket is one lock: a call takes at most 256 locks,
-- whatever it writes (a delete of 100,000 memories too), and a tenant role at most 768 at a
-- time; keys of one bucket serialise as if they were one. Locks are taken in bucket order.
-- A salt that is not the tenant's is refused. Returns how many buckets the call locked.
CREATE FUNCTION pgmem.take_locks(for_tenant text, salt text, kind text, lock_keys text[])
    RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pgmem, pg_temp
AS $body$
DECLARE
    expected text;
    bucket integer;
    taken integer := 0;
BEGIN
    IF kind IS NULL OR kind NOT IN ('content', 'item', 'entity') THEN
        RAISE EXCEPTION 'pgmem lock kind % is not content, item or entity', kind
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT encode(sha256(convert_to(s.lock_salt || chr(10) || for_tenant, 'UTF8')), 'hex')
      INTO expected FROM tenant_secrets s WHERE s.tenant = '';
    IF expected IS NULL THEN
        RAISE EXCEPTION 'pgmem''s schema has no lock secret: run pgmem migrate'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF salt IS NULL THEN
        -- Not shown by a tenant role (made by grant-tenant: a salt row of its name, which it
        -- may read and not write): the owner's, and other trusted roles', own tenants.
        IF EXISTS (SELECT FROM tenant_secrets s WHERE s.tenant = session_user::text)
           AND NOT has_table_privilege(session_user, 'tenant_secrets', 'INSERT') THEN
            RAISE EXCEPTION 'role % may not take the locks of tenant %', session_user, for_tenant
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    ELSIF salt <> expected THEN
        RAISE EXCEPTION 'role % may not take the locks of tenant %', session_user, for_tenant
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    FOR bucket IN
        SELECT DISTINCT hashtext(expected || chr(10) || k) & 255 FROM unnest(lock_keys) k
         ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(hashtext(kind || chr(10) || expected), bucket);
        taken := taken + 1;
    END LOOP;
    RETURN taken;
END
$body$;
