-- A clone of a prepared database (file copy: no WAL for the whole database).
CREATE DATABASE {db} TEMPLATE {template} STRATEGY FILE_COPY
