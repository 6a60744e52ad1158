//! A JSON tree that keeps object keys in the order they were written, so a staged manifest reads like its source.
//!
//! serde_json's `preserve_order` feature would do the same, but cargo unifies features across the workspace:
//! turning it on here would change the key order of every JSON document the host prints,
//! and only in builds that include xtask, such as `cargo test --workspace`.
//! A small visitor is cheaper than a host that behaves differently under test.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

/// A JSON value whose objects are ordered lists of members.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Json>),
    /// Members in source order; a repeated key keeps its first position and its last value, as serde_json does.
    Object(Vec<(String, Json)>),
}

impl Json {
    pub(crate) fn parse(text: &str) -> serde_json::Result<Json> {
        serde_json::from_str(text)
    }

    /// Pretty-printed with two-space indentation and a final newline.
    pub(crate) fn to_pretty_string(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a JSON tree always serializes");
        text.push('\n');
        text
    }

    /// The member `key` of an object; `None` for a missing key or a value that is not an object.
    pub(crate) fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(it) => Some(it),
            _ => None,
        }
    }

    /// Sets the member `key` of an object: in place if it exists, appended otherwise.
    ///
    /// Panics if `self` is not an object; callers check that first.
    pub(crate) fn set(&mut self, key: &str, value: Json) {
        let Json::Object(members) = self else {
            panic!("Json::set on a value that is not an object");
        };
        insert(members, key.to_owned(), value);
    }
}

fn insert(members: &mut Vec<(String, Json)>, key: String, value: Json) {
    match members.iter_mut().find(|(k, _)| *k == key) {
        Some((_, slot)) => *slot = value,
        None => members.push((key, value)),
    }
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => serializer.serialize_unit(),
            Json::Bool(it) => serializer.serialize_bool(*it),
            Json::Number(it) => it.serialize(serializer),
            Json::String(it) => serializer.serialize_str(it),
            Json::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Json::Object(members) => {
                let mut map = serializer.serialize_map(Some(members.len()))?;
                for (key, value) in members {
                    map.serialize_entry(key, value)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Json, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_none<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        serde_json::Number::from_f64(v)
            .map(Json::Number)
            .ok_or_else(|| E::custom("a JSON number must be finite"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Json, E> {
        Ok(Json::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::String(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut members = Vec::new();
        while let Some((key, value)) = map.next_entry::<String, Json>()? {
            insert(&mut members, key, value);
        }
        Ok(Json::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_key_order_at_every_depth() {
        let source = r#"{"zeta":1,"alpha":{"z":[true,null,-2,0.5],"a":"x"},"id":"p"}"#;
        let json = Json::parse(source).unwrap();
        assert_eq!(serde_json::to_string(&json).unwrap(), source);
    }

    #[test]
    fn set_replaces_in_place_or_appends() {
        let mut json = Json::parse(r#"{"id":"p","library":"old.so","name":"P"}"#).unwrap();
        json.set("library", Json::String("libp.so".to_owned()));
        json.set("sha256", Json::String("ab".to_owned()));
        assert_eq!(
            json.to_pretty_string(),
            "{\n  \"id\": \"p\",\n  \"library\": \"libp.so\",\n  \"name\": \"P\",\n  \"sha256\": \"ab\"\n}\n"
        );
        assert_eq!(json.get("id").and_then(Json::as_str), Some("p"));
        assert_eq!(json.get("missing"), None);
    }
}
