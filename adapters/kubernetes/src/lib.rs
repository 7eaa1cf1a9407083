//! The kubernetes engine of taskgate (placeholder until its issue lands).
