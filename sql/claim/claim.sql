-- Claim up to $3 runnable jobs of queue $1 for worker $5 from the ready
-- ring's current bank: conveyor_internal.claim_ready(), whose body
-- (conveyor_internal.claim_statement(), sql/claim/) is written
-- for the current bank by conveyor_internal.define_ready_slot(). A function
-- so that each connection plans the claim once and keeps the plan, through
-- a transaction-mode pooler too. $6 is the queue's global concurrency limit
-- and $7 the room left in its rate window (NULL: none).
SELECT * FROM conveyor_internal.claim_ready($1::text, $2::text[], $3::bigint, $4::float8, $5::text,
                                            $6::integer, $7::integer)
