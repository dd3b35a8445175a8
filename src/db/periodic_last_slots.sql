SELECT name, last_slot FROM conveyor.periodic WHERE name = ANY($1)
