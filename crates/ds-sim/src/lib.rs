//! ds-sim
