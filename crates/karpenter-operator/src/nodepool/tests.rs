//! Tests of the NodePool controllers against the in-process API server.
