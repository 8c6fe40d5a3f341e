//! The CSV loader, with the settings of the registry's two CSV datasets and a plain one.
#![no_main]

use flint_common::data::csv::{CsvSpec, Missing, parse_bytes};
use flint_common::data::registry;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let plain = CsvSpec {
        header: true,
        skip_columns: vec![0],
        on_missing: Missing::Impute,
        ..CsvSpec::new("", vec!["a".into(), "b".into(), "c".into()])
    };
    let tabs = CsvSpec {
        delimiter: b'\t',
        on_missing: Missing::Drop,
        ..CsvSpec::new("", vec!["a".into(), "b".into()])
    };
    for spec in [registry::magic(), registry::breast_cancer(), plain, tabs] {
        let _ = parse_bytes(data, &spec);
    }
});
