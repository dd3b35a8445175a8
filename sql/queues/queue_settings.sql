-- $1: pause | resume | limit | rate; see conveyor.pause_queue and friends.
SELECT CASE $1
    WHEN 'pause'  THEN (SELECT conveyor.pause_queue($2)::text)
    WHEN 'resume' THEN (SELECT conveyor.resume_queue($2)::text)
    WHEN 'limit'  THEN (SELECT conveyor.set_queue_limit($2, $3)::text)
    WHEN 'rate'   THEN (SELECT conveyor.set_queue_rate_limit($2, $3, make_interval(secs => $4))::text)
END
