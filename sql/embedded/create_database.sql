-- The name is filled in with psycopg.sql.Identifier: CREATE DATABASE takes no parameters.
CREATE DATABASE {name}
