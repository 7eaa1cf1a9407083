//! A request's `params`, with the members every request is checked on read
//! while the body is parsed: `taskId` and the 2026-07-28 `_meta` keys. The tree
//! of values is built only when a handler asks for more (a `tools/call` for its
//! arguments); a `tasks/get` never does, so a poll builds no map at all.

use std::fmt;
use std::ops::Deref;
use std::sync::OnceLock;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// `_meta` key of the protocol version (2026-07-28).
pub const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key of the client capabilities (2026-07-28).
pub const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// The tasks extension id (2026-07-28).
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// A map key `serde_json` reads as a raw value when it comes first in an object
/// (its `raw_value` feature is on in this build). A body that holds it is read
/// by the general path, which gives it exactly the reading it always had.
const RAW_VALUE_KEY: &str = "$serde_json::private::RawValue";

/// What a member of interest holds, as far as the checks need to know.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Member {
    /// Not there.
    #[default]
    Absent,
    /// A string (kept only for `taskId` and the protocol version).
    Str(Box<str>),
    /// An object.
    Object,
    /// Anything else: `null`, a number, an array, a string not kept.
    Other,
}

impl Member {
    /// The string, if this member is one.
    #[must_use]
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::Str(s) => Some(s),
            _ => None,
        }
    }

    fn of(value: Option<&Value>, keep_text: bool) -> Self {
        match value {
            None => Self::Absent,
            Some(Value::String(s)) if keep_text => Self::Str(s.as_str().into()),
            Some(Value::Object(_)) => Self::Object,
            Some(_) => Self::Other,
        }
    }
}

/// The members every request is checked on, read once. Each means exactly what
/// the same lookup in the tree of values would find (for repeated keys, the
/// last one, as in the tree).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// `params.taskId`.
    pub task_id: Member,
    /// `params._meta["io.modelcontextprotocol/protocolVersion"]`.
    pub version: Member,
    /// `params._meta["io.modelcontextprotocol/clientCapabilities"]`.
    pub capabilities: Member,
    /// The capabilities are an object whose `extensions` object has the tasks
    /// extension.
    pub tasks: bool,
    /// The capabilities are an object with an `elicitation` member.
    pub elicitation: bool,
}

impl Facts {
    /// The facts of a tree of values.
    #[must_use]
    pub fn of(params: &Value) -> Self {
        let meta = params.get("_meta");
        let capabilities = meta.and_then(|m| m.get(META_CAPABILITIES));
        Self {
            task_id: Member::of(params.get("taskId"), true),
            version: Member::of(meta.and_then(|m| m.get(META_VERSION)), true),
            capabilities: Member::of(capabilities, false),
            tasks: capabilities
                .and_then(|c| c.get("extensions"))
                .and_then(|e| e.get(TASKS_EXTENSION))
                .is_some(),
            elicitation: capabilities.and_then(|c| c.get("elicitation")).is_some(),
        }
    }

    /// Forgets what was read under `node`: its key came again, and the last
    /// one is what counts.
    fn reset(&mut self, node: Node) {
        match node {
            Node::Meta => {
                self.version = Member::Absent;
                self.capabilities = Member::Absent;
                self.tasks = false;
                self.elicitation = false;
            }
            Node::Capabilities => {
                self.capabilities = Member::Absent;
                self.tasks = false;
                self.elicitation = false;
            }
            Node::Extensions => self.tasks = false,
            _ => {}
        }
    }

    fn record(&mut self, node: Node, member: Member) {
        match node {
            Node::TaskId => self.task_id = member,
            Node::Version => self.version = member,
            Node::Capabilities => self.capabilities = member,
            Node::Tasks => self.tasks = true,
            Node::Elicitation => self.elicitation = true,
            _ => {}
        }
    }
}

/// A request's params: an object, with its [`Facts`]. It reads as the
/// [`Value`] it is (`params.get("arguments")`); built from a body, that tree is
/// parsed the first time it is asked for.
///
/// One pointer wide: a message is moved through every future that serves it,
/// and each holds its own copy (a wider message made every request copy about
/// a kilobyte more).
#[derive(Clone)]
pub struct Params(Box<Inner>);

#[derive(Clone)]
struct Inner {
    /// The body these params are the `params` member of, when the tree is not
    /// built yet.
    body: Option<Box<[u8]>>,
    tree: OnceLock<Value>,
    facts: Facts,
}

impl Params {
    /// Params from a tree of values (an object; anything else reads as empty).
    #[must_use]
    pub fn from_value(value: Value) -> Self {
        let value = if value.is_object() {
            value
        } else {
            Value::Object(Map::new())
        };
        Self(Box::new(Inner {
            body: None,
            facts: Facts::of(&value),
            tree: OnceLock::from(value),
        }))
    }

    /// Params of `body`, whose `params` member is an object with these facts
    /// (read by [`Walked`] while `body` was parsed).
    pub(super) fn from_body(body: &[u8], facts: Facts) -> Self {
        Self(Box::new(Inner {
            body: Some(body.into()),
            tree: OnceLock::new(),
            facts,
        }))
    }

    /// The members every request is checked on.
    #[must_use]
    pub fn facts(&self) -> &Facts {
        &self.0.facts
    }

    /// `taskId`, when it is a string.
    #[must_use]
    pub fn task_id(&self) -> Option<&str> {
        self.0.facts.task_id.as_str()
    }

    /// The 2026-07-28 protocol version in `_meta`, when it is a string.
    #[must_use]
    pub fn meta_version(&self) -> Option<&str> {
        self.0.facts.version.as_str()
    }

    /// The params as a tree without keeping it: the one already made, or a
    /// fresh parse of the body that is freed with the returned value. For a
    /// request that lives long after it has read its params (a listen stream
    /// holds its request for its whole life): dereferencing instead keeps the
    /// tree, several KiB of maps, as long as the request.
    #[must_use]
    pub fn uncached(&self) -> std::borrow::Cow<'_, Value> {
        match self.0.tree.get() {
            Some(tree) => std::borrow::Cow::Borrowed(tree),
            None => std::borrow::Cow::Owned(parse_params(self.0.body.as_deref())),
        }
    }
}

/// The `params` object of a message body (parsed once already, with `params`
/// an object); an empty object when it is not one.
fn parse_params(body: Option<&[u8]>) -> Value {
    let mut message: Value = body
        .and_then(|b| serde_json::from_slice(b).ok())
        .unwrap_or(Value::Null);
    match message.get_mut("params").map(Value::take) {
        Some(params @ Value::Object(_)) => params,
        _ => Value::Object(Map::new()),
    }
}

impl Default for Params {
    fn default() -> Self {
        Self::from_value(Value::Object(Map::new()))
    }
}

impl Deref for Params {
    type Target = Value;

    fn deref(&self) -> &Value {
        let inner = &*self.0;
        // The body parsed once already, with `params` an object: it parses
        // again the same way.
        inner
            .tree
            .get_or_init(|| parse_params(inner.body.as_deref()))
    }
}

impl fmt::Debug for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Params")
            .field("value", &**self)
            .field("facts", &self.0.facts)
            .finish()
    }
}

/// What a `params` member turned out to be.
#[derive(Debug)]
pub(super) enum Walked {
    /// `null`.
    Null,
    /// An object, with its facts.
    Object(Facts),
    /// Anything else.
    Other,
}

impl<'de> serde::Deserialize<'de> for Walked {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut facts = Facts::default();
        let member = Walk {
            node: Node::Top,
            facts: &mut facts,
        }
        .deserialize(d)?;
        Ok(match member {
            Member::Object => Self::Object(facts),
            Member::Absent => Self::Null,
            _ => Self::Other,
        })
    }
}

/// Where in `params` a value sits, for the members of interest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Top,
    TaskId,
    Meta,
    Version,
    Capabilities,
    Extensions,
    Tasks,
    Elicitation,
    Elsewhere,
}

impl Node {
    fn child(self, key: &str) -> Self {
        match (self, key) {
            (Self::Top, "taskId") => Self::TaskId,
            (Self::Top, "_meta") => Self::Meta,
            (Self::Meta, META_VERSION) => Self::Version,
            (Self::Meta, META_CAPABILITIES) => Self::Capabilities,
            (Self::Capabilities, "extensions") => Self::Extensions,
            (Self::Capabilities, "elicitation") => Self::Elicitation,
            (Self::Extensions, TASKS_EXTENSION) => Self::Tasks,
            _ => Self::Elsewhere,
        }
    }

    fn keeps_text(self) -> bool {
        matches!(self, Self::TaskId | Self::Version)
    }
}

/// Reads one value as the tree of values would (every string and number
/// checked; the parser's nesting limit applies, as every container is read
/// through `deserialize_any`), builds nothing, and notes the facts it passes.
/// `null` answers [`Member::Absent`], which only the top level looks at.
struct Walk<'f> {
    node: Node,
    facts: &'f mut Facts,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = Member;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Member, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = Member;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Member, E> {
        Ok(Member::Other)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Member, E> {
        Ok(Member::Other)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Member, E> {
        Ok(Member::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Member, E> {
        Ok(Member::Other)
    }

    fn visit_unit<E>(self) -> Result<Member, E> {
        Ok(if self.node == Node::Top {
            Member::Absent
        } else {
            Member::Other
        })
    }

    fn visit_str<E>(self, s: &str) -> Result<Member, E> {
        Ok(if self.node.keeps_text() {
            Member::Str(s.into())
        } else {
            Member::Other
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Member, A::Error> {
        while seq
            .next_element_seed(Walk {
                node: Node::Elsewhere,
                facts: &mut *self.facts,
            })?
            .is_some()
        {}
        Ok(Member::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Member, A::Error> {
        // Only an object at a node of interest has children of interest.
        let parent = if self.node.keeps_text() {
            Node::Elsewhere
        } else {
            self.node
        };
        while let Some(child) = map.next_key_seed(Key(parent))? {
            self.facts.reset(child);
            let member = map.next_value_seed(Walk {
                node: child,
                facts: &mut *self.facts,
            })?;
            self.facts.record(child, member);
        }
        Ok(Member::Object)
    }
}

/// A map key, read (and checked) as the tree would, answering the child node
/// it leads to.
struct Key(Node);

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Node;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Node, E> {
        if key == RAW_VALUE_KEY {
            return Err(E::custom("a key the general path reads"));
        }
        Ok(self.0.child(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn walked(params: &str) -> Option<Facts> {
        match serde_json::from_str::<Walked>(params).ok()? {
            Walked::Object(facts) => Some(facts),
            _ => None,
        }
    }

    /// The facts read while parsing are the facts of the tree, whatever the
    /// shape: repeated keys, wrong types, members nested where they do not
    /// count.
    #[test]
    fn walked_facts_are_the_facts_of_the_tree() {
        let v = META_VERSION;
        let c = META_CAPABILITIES;
        let t = TASKS_EXTENSION;
        let cases = [
            r#"{}"#.to_owned(),
            r#"{"taskId":"tg2.abc"}"#.to_owned(),
            r#"{"taskId":7}"#.to_owned(),
            r#"{"taskId":null}"#.to_owned(),
            r#"{"taskId":{"taskId":"x"}}"#.to_owned(),
            r#"{"taskId":"a","taskId":"b"}"#.to_owned(),
            r#"{"taskId":"a","taskId":[1]}"#.to_owned(),
            r#"{"taskId":"t\u00e9\n\"q\""}"#.to_owned(),
            format!(r#"{{"_meta":{{"{v}":"2026-07-28","{c}":{{"extensions":{{"{t}":{{}}}}}}}}}}"#),
            format!(r#"{{"_meta":{{"{v}":"2026-07-28","{c}":{{"elicitation":null}}}}}}"#),
            format!(r#"{{"_meta":{{"{v}":5,"{c}":[]}}}}"#),
            format!(r#"{{"_meta":{{"{v}":"x","{c}":"caps"}}}}"#),
            format!(r#"{{"_meta":{{"{v}":"x"}},"_meta":{{}}}}"#),
            format!(r#"{{"_meta":{{"{v}":"x"}},"_meta":null}}"#),
            format!(r#"{{"_meta":[{{"{v}":"x"}}]}}"#),
            format!(r#"{{"_meta":{{"{c}":{{"extensions":{{"{t}":1}}}},"{c}":{{}}}}}}"#),
            format!(r#"{{"_meta":{{"{c}":{{"extensions":{{"{t}":1}},"extensions":[]}}}}}}"#),
            format!(r#"{{"_meta":{{"{c}":{{"extensions":{{"{t}":{{"{t}":1}}}}}}}}}}"#),
            format!(r#"{{"_meta":{{"{c}":{{"elicitation":1,"elicitation":2}}}}}}"#),
            format!(
                r#"{{"{v}":"top","extensions":{{"{t}":{{}}}},"x":{{"_meta":{{"{v}":"deep"}}}}}}"#
            ),
            format!(
                r#"{{"taskId":"t","_meta":{{"{v}":"2026-07-28","{c}":{{}}}},"arguments":{{"a":[1,2.5,-3,true,null,"s"]}}}}"#
            ),
        ];
        for case in &cases {
            let tree: Value = serde_json::from_str(case).unwrap();
            assert_eq!(walked(case), Some(Facts::of(&tree)), "{case}");
        }
        // A spot check that the table reads what it should.
        let f = walked(&cases[8]).unwrap();
        assert_eq!(f.version.as_str(), Some("2026-07-28"));
        assert!(f.tasks && !f.elicitation && f.capabilities == Member::Object);
        assert_eq!(
            walked(&cases[7]).unwrap().task_id.as_str(),
            Some("té\n\"q\"")
        );
    }

    /// What the tree refuses, the walk refuses (the caller then takes the
    /// general path, which answers it as before).
    #[test]
    fn the_walk_refuses_what_the_tree_refuses() {
        let deep = |n: usize| format!("{{\"a\":{}0{}}}", "[".repeat(n), "]".repeat(n));
        let limit = (1..200)
            .find(|n| serde_json::from_str::<Value>(&deep(*n)).is_err())
            .expect("the parser has a nesting limit");
        for n in [limit - 1, limit, limit + 1] {
            let body = deep(n);
            assert_eq!(
                serde_json::from_str::<Walked>(&body).is_ok(),
                serde_json::from_str::<Value>(&body).is_ok(),
                "nesting {n}"
            );
        }
        for bad in [
            r#"{"a":"\ud800"}"#,
            r#"{"\ud800":1}"#,
            "{\"a\":\"\u{1}\"}",
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":[1,]}"#,
        ] {
            assert!(serde_json::from_str::<Value>(bad).is_err(), "{bad}");
            assert!(serde_json::from_str::<Walked>(bad).is_err(), "{bad}");
        }
        // The key the tree reads as a raw value goes to the general path.
        assert!(walked(r#"{"_meta":{"$serde_json::private::RawValue":"{}"}}"#).is_none());
    }

    #[test]
    fn params_read_as_their_tree() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"deploy","arguments":{"env":"prod"},"taskId":"t"}}"#;
        let facts = walked(r#"{"name":"deploy","arguments":{"env":"prod"},"taskId":"t"}"#).unwrap();
        let lazy = Params::from_body(body, facts);
        assert_eq!(lazy.task_id(), Some("t"));
        assert_eq!(lazy["arguments"]["env"], "prod");
        let built = Params::from_value(
            json!({"name": "deploy", "arguments": {"env": "prod"}, "taskId": "t"}),
        );
        assert_eq!(*lazy, *built);
        assert_eq!(lazy.facts(), built.facts());
        assert_eq!(*Params::default(), json!({}));
    }

    /// `uncached` gives the same tree as dereferencing, and keeps none: a
    /// listen stream reads its task ids this way and holds no tree.
    #[test]
    fn an_uncached_read_keeps_no_tree() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"taskIds":["a","b"]}}}"#;
        let facts = walked(r#"{"notifications":{"taskIds":["a","b"]}}"#).unwrap();
        let lazy = Params::from_body(body, facts);
        let read = lazy.uncached();
        assert!(matches!(read, std::borrow::Cow::Owned(_)));
        assert_eq!(read["notifications"]["taskIds"], json!(["a", "b"]));
        drop(read);
        assert!(lazy.0.tree.get().is_none(), "nothing kept");
        // Once the tree is made, it is lent, not parsed again.
        assert_eq!(lazy["notifications"]["taskIds"][1], "b");
        assert!(matches!(lazy.uncached(), std::borrow::Cow::Borrowed(_)));
    }
}
