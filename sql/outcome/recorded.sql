-- Which of these (id, lease_token) claims ended with their outcome recorded:
-- the job is no longer started and still carries that claim's token (a
-- rescue or release clears it; a new claim replaces it). Asked after an
-- outcome write whose acknowledgement was lost, to tell an outcome that did
-- commit from a lease that was lost.
SELECT j.id
FROM conveyor.jobs j
JOIN unnest($1::uuid[], $2::bigint[]) AS r(id, lease_token)
  ON j.id = r.id AND j.lease_token = r.lease_token
WHERE j.id = ANY($1::uuid[]) AND j.state <> 'started'
