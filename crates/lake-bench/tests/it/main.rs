//! Tests of the `lake-bench` binary: it runs end to end at tiny sizes and prints its figures
//! (one test binary per crate).

mod bench;
mod memory;
