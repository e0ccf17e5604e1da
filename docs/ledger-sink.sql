-- Example queries over the table "ledger" that `gateway ledger-sink` fills
-- (see docs/ledger-sink.md). Money is in nano-USD (1 USD = 1,000,000,000);
-- divide by 1e9 for dollars only at the end, so that sums stay exact.
-- Times are timestamptz; the queries group by UTC calendar periods, as the
-- gateway's own daily and monthly figures do. Run them with psql, e.g.
--   psql "$DATABASE_URL" -v month=2026-11-01 -f docs/ledger-sink.sql
-- Each query starts with a "-- name:" line.

-- name: invoice
-- The invoice total of every account for every month: requests that ended
-- in the month (end_time, UTC). Non-2xx requests cost nothing and are
-- counted apart.
SELECT account_id,
       date_trunc('month', end_time AT TIME ZONE 'UTC')::date AS month,
       count(*) FILTER (WHERE status BETWEEN 200 AND 299)    AS requests,
       count(*) FILTER (WHERE status NOT BETWEEN 200 AND 299) AS failed_requests,
       count(*) FILTER (WHERE 'estimated' = ANY (flags))      AS estimated_requests,
       sum(cost_nano_usd)                                     AS cost_nano_usd,
       sum(cost_nano_usd) / 1e9                               AS cost_usd
FROM ledger
GROUP BY account_id, month
ORDER BY account_id, month;

-- name: invoice_lines
-- The lines of one month's invoices (psql -v month=YYYY-MM-01): per account
-- and priced model, the quantity of each usage kind and the cost. Each line
-- can be rebuilt from the unit prices in the same rows: quantity × price
-- per million / 1,000,000, rounded as the gateway rounds.
SELECT account_id,
       model,
       count(*)                    AS requests,
       sum(input_tokens)           AS input_tokens,
       sum(output_tokens)          AS output_tokens,
       sum(cache_read_tokens)      AS cache_read_tokens,
       sum(cache_write_5m_tokens)  AS cache_write_5m_tokens,
       sum(cache_write_1h_tokens)  AS cache_write_1h_tokens,
       sum(audio_input_tokens)     AS audio_input_tokens,
       sum(audio_output_tokens)    AS audio_output_tokens,
       sum(web_searches)           AS web_searches,
       sum(cost_nano_usd)          AS cost_nano_usd,
       sum(cost_nano_usd) / 1e9    AS cost_usd
FROM ledger
WHERE end_time >= (:'month'::date)::timestamp AT TIME ZONE 'UTC'
  AND end_time <  (:'month'::date + interval '1 month') AT TIME ZONE 'UTC'
GROUP BY account_id, model
ORDER BY account_id, model;

-- name: spend_per_key_per_day
-- Spend per key and UTC day: chargeback to the teams that hold the keys.
SELECT account_id,
       key_id,
       key_label,
       (end_time AT TIME ZONE 'UTC')::date AS day,
       count(*)                            AS requests,
       sum(input_tokens + cache_read_tokens + cache_write_5m_tokens + cache_write_1h_tokens + audio_input_tokens) AS prompt_tokens,
       sum(output_tokens + audio_output_tokens) AS completion_tokens,
       sum(cost_nano_usd)                  AS cost_nano_usd,
       sum(cost_nano_usd) / 1e9            AS cost_usd
FROM ledger
GROUP BY account_id, key_id, key_label, day
ORDER BY day, account_id, key_id;

-- name: vendor_usage_table
-- A vendor's usage report, loaded as it comes (one row per model and UTC
-- day; most vendors' usage exports and usage APIs give this grain), e.g.
--   \copy vendor_usage FROM 'anthropic-usage-2026-11.csv' WITH (FORMAT csv, HEADER)
CREATE TABLE IF NOT EXISTS vendor_usage (
    day                date   NOT NULL,
    model              text   NOT NULL,
    input_tokens       bigint NOT NULL DEFAULT 0, -- uncached input
    output_tokens      bigint NOT NULL DEFAULT 0,
    cache_read_tokens  bigint NOT NULL DEFAULT 0,
    cache_write_tokens bigint NOT NULL DEFAULT 0,
    cost_usd           numeric,                   -- what the vendor bills, when the report says
    PRIMARY KEY (day, model)
);

-- name: reconciliation
-- The gateway's figures per model and UTC day beside the vendor's report,
-- with the differences; rows that agree are left out. The model is the one
-- the vendor's reply named (model_reported), or the priced one when the
-- reply named none. Only requests the client was charged for count: a
-- failed request the vendor billed anyway shows as a difference.
WITH ours AS (
    SELECT (end_time AT TIME ZONE 'UTC')::date               AS day,
           coalesce(nullif(model_reported, ''), model)       AS model,
           sum(input_tokens)                                 AS input_tokens,
           sum(output_tokens)                                AS output_tokens,
           sum(cache_read_tokens)                            AS cache_read_tokens,
           sum(cache_write_5m_tokens + cache_write_1h_tokens) AS cache_write_tokens,
           sum(cost_nano_usd) / 1e9                          AS cost_usd
    FROM ledger
    WHERE status BETWEEN 200 AND 299
    GROUP BY 1, 2
)
SELECT coalesce(o.day, v.day)     AS day,
       coalesce(o.model, v.model) AS model,
       coalesce(o.input_tokens, 0)       - coalesce(v.input_tokens, 0)       AS input_tokens_diff,
       coalesce(o.output_tokens, 0)      - coalesce(v.output_tokens, 0)      AS output_tokens_diff,
       coalesce(o.cache_read_tokens, 0)  - coalesce(v.cache_read_tokens, 0)  AS cache_read_tokens_diff,
       coalesce(o.cache_write_tokens, 0) - coalesce(v.cache_write_tokens, 0) AS cache_write_tokens_diff,
       o.cost_usd AS our_cost_usd,
       v.cost_usd AS vendor_cost_usd
FROM ours o
FULL JOIN vendor_usage v ON v.day = o.day AND v.model = o.model
WHERE o.day IS NULL OR v.day IS NULL
   OR o.input_tokens <> v.input_tokens OR o.output_tokens <> v.output_tokens
   OR o.cache_read_tokens <> v.cache_read_tokens OR o.cache_write_tokens <> v.cache_write_tokens
ORDER BY day, model;

-- name: rejects
-- The entries PostgreSQL refused, set aside by the sink and missing from
-- "ledger" until an operator copies or drops them (docs/ledger-sink.md,
-- "Refused entries"). A NUL reads \u0000 in a text value here.
SELECT account_id,
       entry_id,
       rejected_at,
       error_code,
       error,
       entry->>'request_id'                AS request_id,
       entry->>'model'                     AS model,
       entry->>'model_requested'           AS model_requested,
       (entry->>'cost_nano_usd')::bigint   AS cost_nano_usd
FROM ledger_rejects
ORDER BY rejected_at, account_id, entry_id;
