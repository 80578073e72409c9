-- The bench creates its own databases; {db} is filled with sql.Identifier.
CREATE DATABASE {db}
