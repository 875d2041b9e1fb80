//! Interruption messages.
