SELECT name, last_slot FROM conveyor.periodic WHERE name = ANY($1) AND last_slot IS NOT NULL
