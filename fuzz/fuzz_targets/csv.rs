//! The CSV loader, with the settings of the registry's two CSV datasets and a plain one.
#![no_main]

use flint_common::data::csv::{CsvSpec, parse};
use flint_common::data::registry;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let plain = CsvSpec {
        path: String::new(),
        label_column: None,
        classes: vec!["a".into(), "b".into(), "c".into()],
        header: true,
        skip_columns: vec![0],
        features: None,
    };
    for spec in [registry::magic(), registry::breast_cancer(), plain] {
        let _ = parse(text, &spec);
    }
});
