-- Record the outcomes of a batch of attempts: see
-- sql/outcome/record_outcomes.sql, which holds the statement so
-- that its plan is made once per connection.
SELECT * FROM conveyor_internal.record_outcomes($1::uuid[], $2::bigint[], $3::text[], $4::jsonb[],
                                                $5::text[], $6::float8[], $7::float8[])
