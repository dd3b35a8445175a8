SELECT conveyor.requeue($1::uuid[]) AS requeued
