//! Words for what the tools print.

/// `n` and the noun in its number: "1 round", "3 rounds" (`noun` takes an `s` for the plural).
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    match n.into() {
        1 => format!("1 {noun}"),
        n => format!("{n} {noun}s"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_takes_the_singular_every_other_number_the_plural() {
        assert_eq!(super::count(1u32, "round"), "1 round");
        assert_eq!(super::count(0u32, "machine"), "0 machines");
        assert_eq!(super::count(12u64, "client"), "12 clients");
    }
}
