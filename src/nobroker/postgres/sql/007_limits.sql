-- nobroker PostgreSQL schema, version 7: limits per kind (Queue.set_limit, issue 16).
--
-- One row per limited kind of a queue: at most `concurrency` of its jobs
-- leased at once, at most `rate` leases per `per` seconds (a token bucket of
-- `burst` tokens, NULL: `rate`). A rate limit's bucket is `tokens` as of
-- `tokens_at` (epoch seconds of the database clock). A lease of a queue that
-- has limits locks every limit row of its queue (FOR UPDATE, in kind order),
-- then counts the leased jobs of each limited kind and takes at most what
-- each limit allows, and spends the tokens, in one transaction: two leases
-- never both see the same free slot or token.

CREATE TABLE {schema}.limits (
    queue        text COLLATE "C" NOT NULL,
    kind         text COLLATE "C" NOT NULL,
    concurrency  integer CONSTRAINT limits_concurrency_positive CHECK (concurrency >= 1),
    rate         integer CONSTRAINT limits_rate_positive CHECK (rate >= 1),
    per          double precision NOT NULL CONSTRAINT limits_per_positive CHECK (per > 0),
    burst        integer CONSTRAINT limits_burst_positive CHECK (burst >= 1),
    tokens       double precision,
    tokens_at    double precision,
    CONSTRAINT limits_pkey PRIMARY KEY (queue, kind),
    CONSTRAINT limits_some_limit CHECK (concurrency IS NOT NULL OR rate IS NOT NULL),
    CONSTRAINT limits_bucket_with_rate CHECK ((rate IS NULL) = (tokens IS NULL) AND (rate IS NULL) = (tokens_at IS NULL))
);
