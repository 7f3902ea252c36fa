//! A guard in front of the `config` crate: it reads a key such as `a[-99999999]` as a path
//! with an array index and sizes an array to it, so one such key (a table header
//! `["4[-0444444444444444419]"]`, found by fuzzing) made it allocate exabytes and abort.
//! Configuration keys are checked to be plain option names before `config` sees them.

/// `Ok` when every key of the TOML `text`, at every depth, is free of `[`, `]` and `.`;
/// otherwise why not (a TOML syntax error included).
pub fn check(text: &str) -> Result<(), String> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
    check_table(&table)
}

fn check_table(t: &toml::Table) -> Result<(), String> {
    for (k, v) in t {
        if k.contains(['[', ']', '.']) {
            return Err(format!("key {k:?} is not an option name"));
        }
        check_value(v)?;
    }
    Ok(())
}

fn check_value(v: &toml::Value) -> Result<(), String> {
    match v {
        toml::Value::Table(t) => check_table(t),
        toml::Value::Array(items) => items.iter().try_for_each(check_value),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn bracketed_keys_are_refused_and_plain_ones_pass() {
        assert!(check("[\"4[-0444444444444444419]\"]").unwrap_err().contains("not an option name"));
        assert!(check("\"a.b\" = 1").is_err());
        assert!(check("[[profiles]]\nname = \"x\"\n[[profiles]]\n\"y[1]\" = 2").is_err());
        assert!(check("max-in-flight = 4000\nallowed-targets = [\"10.0.0.0/8\"]\n[t]\nk = 1").is_ok());
        assert!(check("not toml =").is_err());
    }
}
