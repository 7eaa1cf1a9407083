//! The github engine of taskgate (placeholder until its issue lands).
