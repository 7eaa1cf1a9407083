//! The exec engine of taskgate (placeholder until its issue lands).
