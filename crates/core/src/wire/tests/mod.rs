//! Tests of the wire codec as a whole: round trips, robustness on hostile
//! input, and byte-exact golden frames. Unit tests of single pieces live
//! beside them.

pub(crate) mod gen;
mod golden;
mod robustness;
mod round_trip;
