//! The experiment parser and every section's check: any text gives an experiment or an error.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = flint_common::config::Experiment::from_toml(text);
    }
});
