//! DS schemas and rows in a real database.
