//! Which keys each table of the configuration has, derived from the
//! settings structs, and the check of one layer against them.

use super::{
    merge_into, Approvals, ConfigError, ExecSettings, Expose, HttpSecret, HttpSettings,
    McpServerSettings, McpSettings, Settings, SpawnSettings, ToolSettings, Workers,
};
use crate::Limits;
use serde::de::Visitor;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

pub(super) fn invalid(key: &str, source: &str, message: &str) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_owned(),
        source_name: source.to_owned(),
        message: message.to_owned(),
    }
}

/// The keys of a table: the fields `T` deserialises, as serde names them
/// (renames included), read from `T`'s own `Deserialize`. A field added
/// to a settings struct is a key at once; there is no list to forget.
pub(super) fn keys_of<'de, T: Deserialize<'de>>() -> Vec<String> {
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(FieldNames(&mut fields));
    fields.iter().map(|f| (*f).to_owned()).collect()
}

/// A deserializer that only records the field names a struct asks for.
struct FieldNames<'a>(&'a mut &'static [&'static str]);

impl<'de> serde::Deserializer<'de> for FieldNames<'_> {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(serde::de::Error::custom("names read"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// The limit names (`isolation` is a root key).
fn limit_keys() -> Vec<String> {
    let mut keys = keys_of::<Limits>();
    keys.retain(|k| k != "isolation");
    keys
}

fn unknown(key: &str, table: &str, source: &str, known: &[String]) -> ConfigError {
    let suggestion = harness_core::tool::closest_name(key, known).map(str::to_owned);
    ConfigError::UnknownKey {
        key: key.to_owned(),
        table: table.to_owned(),
        source_name: source.to_owned(),
        suggestion,
    }
}

fn check_keys(
    table: &Map<String, Value>,
    known: &[String],
    name: &str,
    source: &str,
) -> Result<(), ConfigError> {
    match table.keys().find(|k| !known.contains(k)) {
        Some(k) => Err(unknown(k, name, source, known)),
        None => Ok(()),
    }
}

fn sub_table<'a>(
    table: &'a Map<String, Value>,
    key: &str,
    name: &str,
    source: &str,
) -> Result<Option<&'a Map<String, Value>>, ConfigError> {
    match table.get(key) {
        None => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(_) => Err(invalid(key, source, &format!("{name} must be a table"))),
    }
}

/// Checks every key of one layer (the root table, a provider table, or
/// overrides) against the schema.
pub(super) fn validate_layer(
    table: &Map<String, Value>,
    name: &str,
    source: &str,
) -> Result<(), ConfigError> {
    let prefix = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .map(|n| format!("{n}."))
        .unwrap_or_default();
    let mut root_known = keys_of::<Settings>();
    if name == "the root table" {
        root_known.extend(["ceilings".to_owned(), "providers".to_owned()]);
    }
    check_keys(table, &root_known, name, source)?;
    let sections: [(&str, Vec<String>); 10] = [
        ("limits", limit_keys()),
        ("mcp", keys_of::<McpSettings>()),
        ("exec", keys_of::<ExecSettings>()),
        ("http", keys_of::<HttpSettings>()),
        ("expose", keys_of::<Expose>()),
        ("spawn", keys_of::<SpawnSettings>()),
        ("workers", keys_of::<Workers>()),
        ("approvals", keys_of::<Approvals>()),
        ("sessions", keys_of::<crate::session::SessionLimits>()),
        ("durable", keys_of::<crate::durable::DurableSettings>()),
    ];
    for (key, known) in sections {
        let section = format!("[{prefix}{key}]");
        if let Some(t) = sub_table(table, key, &section, source)? {
            check_keys(t, &known, &section, source)?;
        }
    }
    if let Some(http) = sub_table(table, "http", &format!("[{prefix}http]"), source)? {
        let name = format!("[{prefix}http.secrets]");
        if let Some(secrets) = sub_table(http, "secrets", &name, source)? {
            for (secret, t) in secrets {
                let section = format!("[{prefix}http.secrets.{secret}]");
                let Value::Object(t) = t else {
                    return Err(invalid(&section, source, "must be a table"));
                };
                check_keys(t, &keys_of::<HttpSecret>(), &section, source)?;
            }
        }
    }
    if let Some(mcp) = sub_table(table, "mcp", &format!("[{prefix}mcp]"), source)? {
        let name = format!("[{prefix}mcp.servers]");
        if let Some(servers) = sub_table(mcp, "servers", &name, source)? {
            for (server, t) in servers {
                let section = format!("[{prefix}mcp.servers.{server}]");
                let Value::Object(t) = t else {
                    return Err(invalid(&section, source, "must be a table"));
                };
                check_keys(t, &keys_of::<McpServerSettings>(), &section, source)?;
                let ident = server
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                    && server
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !ident {
                    return Err(invalid(
                        &section,
                        source,
                        "a server name must be an identifier (letters, digits, _): scripts call tools.mcp.NAME",
                    ));
                }
                if t.contains_key("command") == t.contains_key("url") {
                    return Err(invalid(&section, source, "give either `command` or `url`"));
                }
                if t.contains_key("auth") && !t.contains_key("url") {
                    return Err(invalid(
                        &section,
                        source,
                        "`auth` is for a server reached by `url`",
                    ));
                }
            }
        }
    }
    if let Some(tools) = sub_table(table, "tools", &format!("[{prefix}tools]"), source)? {
        for (tool, t) in tools {
            let section = format!("[{prefix}tools.{tool}]");
            let Value::Object(t) = t else {
                return Err(invalid(&section, source, "must be a table"));
            };
            check_keys(t, &keys_of::<ToolSettings>(), &section, source)?;
        }
    }
    // Types: the layer alone must deserialise (missing keys default).
    let mut probe = serde_json::to_value(Settings::default()).unwrap_or_default();
    if let Value::Object(p) = &mut probe {
        merge_into(p, table.clone());
    }
    serde_json::from_value::<Settings>(probe).map_err(|e| invalid(name, source, &e.to_string()))?;
    Ok(())
}

pub(super) fn parse_ceilings(
    v: &Value,
    source: &str,
) -> Result<BTreeMap<String, u64>, ConfigError> {
    let Value::Object(m) = v else {
        return Err(invalid("ceilings", source, "must be a table"));
    };
    let known = limit_keys();
    check_keys(m, &known, "[ceilings]", source)?;
    m.iter()
        .map(|(k, v)| match v.as_u64() {
            Some(n) => Ok((k.clone(), n)),
            None => Err(invalid(
                &format!("ceilings.{k}"),
                source,
                "must be a non-negative integer",
            )),
        })
        .collect()
}
