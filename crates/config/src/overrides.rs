//! Environment overrides: one config file serves every member and every
//! environment, and what differs (a data directory on a volume, a port a
//! container maps, a token from a secret) comes from the environment.
//!
//! `ZABKEEPER_<KEY>` sets a top-level key, `ZABKEEPER_SERVER_<ID>_<KEY>`
//! a key of the `[[server]]` with that id, `ZABKEEPER_TLS_<KEY>` a key of
//! `[tls]`; the key is the variable's tail in lower case. A value is read as a TOML value when it is one (`100`,
//! `true`, `["ruok", "srvr"]`, `"quoted"`) and as a string otherwise.

use super::{invalid, ConfigError};
use toml::{Table, Value};

/// Variables with this prefix are config keys...
const PREFIX: &str = "ZABKEEPER_";

/// ...except these, which the binary reads itself (`--config`, `--id`,
/// `--log`), or tests and tools set.
const NOT_KEYS: [&str; 4] = ["CONFIG", "ID", "LOG", "JOIN"];

/// Applies the overrides found in `env` to the parsed file; returns the
/// variables applied, for error messages.
pub(super) fn apply(file: &mut Table, env: &[(String, String)]) -> Result<Vec<String>, ConfigError> {
    let mut applied = Vec::new();
    let mut vars: Vec<&(String, String)> = env.iter().filter(|(name, _)| name.starts_with(PREFIX)).collect();
    // Sorted, so two variables naming one key always resolve the same way.
    vars.sort();
    for (name, raw) in vars {
        let tail = &name[PREFIX.len()..];
        if NOT_KEYS.contains(&tail) || tail.starts_with("TEST_") || tail.is_empty() {
            continue;
        }
        let value = typed(raw);
        match tail.strip_prefix("SERVER_") {
            Some(rest) => {
                let (id, key) =
                    rest.split_once('_').and_then(|(id, key)| Some((id.parse::<i64>().ok()?, key))).ok_or_else(
                        || invalid(name, "expected ZABKEEPER_SERVER_<ID>_<KEY>, e.g. ZABKEEPER_SERVER_2_CLIENT_ADDR"),
                    )?;
                let servers = file.get_mut("server").and_then(Value::as_array_mut);
                let member = servers
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_table_mut)
                    .find(|m| m.get("id").and_then(Value::as_integer) == Some(id))
                    .ok_or_else(|| invalid(name, format!("no [[server]] with id {id} in the file")))?;
                member.insert(key.to_ascii_lowercase(), value);
            }
            None if tail.starts_with("TLS_") => {
                let key = tail["TLS_".len()..].to_ascii_lowercase();
                let section = file.entry("tls").or_insert_with(|| Value::Table(Table::new()));
                let section =
                    section.as_table_mut().ok_or_else(|| invalid(name, "`tls` in the file is not a [tls] section"))?;
                section.insert(key, value);
            }
            None => {
                if tail == "SERVER" || tail == "TLS" {
                    return Err(invalid(
                        name,
                        "sections are set one key at a time: ZABKEEPER_SERVER_<ID>_<KEY>, ZABKEEPER_TLS_<KEY>",
                    ));
                }
                file.insert(tail.to_ascii_lowercase(), value);
            }
        }
        applied.push(name.clone());
    }
    Ok(applied)
}

/// The value as TOML reads it, or the raw text as a string.
fn typed(raw: &str) -> Value {
    let parsed: Option<Table> = toml::from_str(&format!("v = {raw}")).ok();
    parsed.and_then(|mut t| t.remove("v")).unwrap_or_else(|| Value::String(raw.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn file() -> Table {
        toml::from_str("tick_ms = 50\n[[server]]\nid = 1\n[[server]]\nid = 2\n").unwrap()
    }

    #[test]
    fn top_level_and_member_keys_are_set_with_their_types() {
        let mut f = file();
        let applied = apply(
            &mut f,
            &env(&[
                ("ZABKEEPER_TICK_MS", "100"),
                ("ZABKEEPER_DATA_DIR", "/data"),
                ("ZABKEEPER_FOUR_LETTER_WORDS", "[\"ruok\"]"),
                ("ZABKEEPER_SERVER_2_CLIENT_ADDR", "zk-1.zk-hs:2181"),
                ("ZABKEEPER_TLS_CERT_FILE", "/tls/{id}.pem"),
                ("ZABKEEPER_TLS_PEER", "true"),
                ("ZABKEEPER_ID", "2"),
                ("ZABKEEPER_LOG", "debug"),
                ("ZABKEEPER_TEST_LOG", "debug"),
                ("HOME", "/root"),
            ]),
        )
        .unwrap();
        assert_eq!(applied.len(), 6);
        assert_eq!(f["tls"]["cert_file"].as_str(), Some("/tls/{id}.pem"));
        assert_eq!(f["tls"]["peer"].as_bool(), Some(true));
        assert_eq!(f["tick_ms"].as_integer(), Some(100));
        assert_eq!(f["data_dir"].as_str(), Some("/data"));
        assert_eq!(f["four_letter_words"].as_array().map(Vec::len), Some(1));
        assert_eq!(f["server"][1]["client_addr"].as_str(), Some("zk-1.zk-hs:2181"));
        assert!(f["server"][0].get("client_addr").is_none());
    }

    #[test]
    fn a_variable_for_a_missing_member_or_of_the_wrong_shape_is_named() {
        let err = |pairs: &[(&str, &str)]| apply(&mut file(), &env(pairs)).unwrap_err().to_string();
        assert!(err(&[("ZABKEEPER_SERVER_9_CLIENT_ADDR", "x:1")]).contains("ZABKEEPER_SERVER_9_CLIENT_ADDR"));
        assert!(err(&[("ZABKEEPER_SERVER_X_CLIENT_ADDR", "x:1")]).contains("ZABKEEPER_SERVER_<ID>_<KEY>"));
        assert!(err(&[("ZABKEEPER_SERVER", "x")]).contains("one key at a time"));
        assert!(err(&[("ZABKEEPER_TLS", "x")]).contains("ZABKEEPER_TLS_<KEY>"));
    }
}
