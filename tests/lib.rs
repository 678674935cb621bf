//! End-to-end tests of ds-reaper against real services.
