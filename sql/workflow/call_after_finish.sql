SELECT conveyor_internal.after_finish($1::uuid[])
