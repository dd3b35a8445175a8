SELECT conveyor.after_finish($1::uuid[])
