//! The IDX (MNIST) decoder: any bytes give images or an error, never an allocation the file's
//! own length does not back.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = flint_common::data::idx::parse(data);
});
