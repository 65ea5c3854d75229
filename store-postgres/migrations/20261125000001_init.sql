-- jobstore schema, version 1. Runs inside the store's schema: every name
-- below is unqualified and resolves through the connection's search_path.

-- Live jobs: waiting, scheduled, running and expired. Archived jobs move to
-- `archive`, so this table (and its claim index) only ever holds the work
-- that is still to be done, however many years of archive pile up.
CREATE TABLE jobs (
    id        text COLLATE "C" PRIMARY KEY,
    jobtype   text COLLATE "C" NOT NULL,
    data      bytea   NOT NULL,
    priority  integer NOT NULL,
    dt        bigint  NOT NULL,
    lock      text COLLATE "C" NOT NULL DEFAULT '',
    attempts  integer NOT NULL DEFAULT 0,
    create_dt bigint  NOT NULL,
    CHECK (lock <> '__done')
) WITH (fillfactor = 90,
        autovacuum_vacuum_scale_factor = 0.01,
        autovacuum_vacuum_insert_scale_factor = 0.01,
        autovacuum_analyze_scale_factor = 0.02);

-- The claim index: one range per jobtype in exactly the contract's claim
-- order. A claim reads it from the front and stops after `limit` eligible
-- entries (dt <= now is checked on the index tuple). Also serves the
-- distinct-jobtype skip scan and the capped waiting counts.
CREATE INDEX jobs_claim ON jobs (jobtype, priority DESC, dt, id);

-- Archived jobs (lock = '__done' is implied and not stored).
CREATE TABLE archive (
    id        text COLLATE "C" PRIMARY KEY,
    jobtype   text COLLATE "C" NOT NULL,
    data      bytea    NOT NULL,
    priority  integer  NOT NULL,
    dt        bigint   NOT NULL,
    attempts  integer  NOT NULL,
    create_dt bigint   NOT NULL,
    done_dt   bigint   NOT NULL,
    code      text     NOT NULL
        CHECK (code IN ('ok', 'failed', 'retry', 'error', 'cancelled', 'timeout')),
    status    integer  NOT NULL,
    output    bytea    NOT NULL
);

-- purge_archived: done_dt grows with insertion order (it is the archiving
-- daemon's clock), so a BRIN index finds old rows at almost no cost per
-- insert.
CREATE INDEX archive_done_dt ON archive USING brin (done_dt);
-- job_counts: an index-only scan once vacuum has marked pages all-visible
-- (the archive is append-mostly, so it nearly always is).
CREATE INDEX archive_counts ON archive (jobtype, code);

-- Handler versions: newest = greatest dt, then the last set (greatest seq).
CREATE TABLE handlers (
    seq         bigserial PRIMARY KEY,
    jobtype     text COLLATE "C" NOT NULL,
    dt          bigint NOT NULL,
    lang        text   NOT NULL,
    body        text   NOT NULL,
    eid         text,
    before      text,
    before_each text,
    after_each  text
);
CREATE INDEX handlers_newest ON handlers (jobtype, dt DESC, seq DESC);

-- Sysid leases.
CREATE TABLE sysids (
    sysid   text COLLATE "C" PRIMARY KEY,
    token   text   NOT NULL,
    expires bigint NOT NULL
);

-- Adds a batch given as parallel arrays and returns the ids inserted.
-- An id present in `jobs` or in `archive` is left alone. The archive check
-- runs *after* the insert, in a statement of its own (so with a fresh
-- snapshot, this function being VOLATILE): an archiving transaction that
-- moved the same id from `jobs` to `archive` while the insert waited on
-- that row has committed by then and is seen, and the row just inserted is
-- removed again before anyone else can see it. One notice per jobtype that
-- got new work goes to `channel` on commit.
CREATE FUNCTION add_jobs(
    p_ids text[], p_jobtypes text[], p_datas bytea[], p_priorities int4[], p_dts int8[],
    p_now int8, p_channel text
) RETURNS SETOF text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_inserted text[];
    v_types text[];
    v_archived text[];
BEGIN
    WITH ins AS (
        INSERT INTO jobs (id, jobtype, data, priority, dt, lock, attempts, create_dt)
        SELECT t.id, t.jobtype, t.data, t.priority, t.dt, '', 0, p_now
        FROM unnest(p_ids, p_jobtypes, p_datas, p_priorities, p_dts)
            AS t (id, jobtype, data, priority, dt)
        ON CONFLICT (id) DO NOTHING
        RETURNING jobs.id, jobs.jobtype
    )
    SELECT coalesce(array_agg(ins.id), '{}'), coalesce(array_agg(DISTINCT ins.jobtype), '{}')
    INTO v_inserted, v_types
    FROM ins;

    SELECT coalesce(array_agg(a.id), '{}') INTO v_archived
    FROM archive a WHERE a.id = ANY (v_inserted);
    IF cardinality(v_archived) > 0 THEN
        DELETE FROM jobs j WHERE j.id = ANY (v_archived);
        v_inserted := ARRAY(SELECT x FROM unnest(v_inserted) x WHERE x <> ALL (v_archived));
    END IF;

    -- A jobtype whose only new job was dropped above gets a spurious
    -- notice, which watchers allow.
    PERFORM pg_notify(p_channel, t) FROM unnest(v_types) t;

    RETURN QUERY SELECT unnest(v_inserted);
END
$$;
