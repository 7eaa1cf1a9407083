//! The stepfunctions engine of taskgate (placeholder until its issue lands).
