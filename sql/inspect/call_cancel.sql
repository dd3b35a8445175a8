SELECT conveyor.cancel($1) AS state
