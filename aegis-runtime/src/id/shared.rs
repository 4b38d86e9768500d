//! `ThreadId` and `GraphFingerprint`: the thread and graph a waypoint
//! belongs to, as every waypoint of a run shares them.
//!
//! A run writes a waypoint per superstep, each naming its thread and its
//! graph's fingerprint. As `String`s each would be copied per superstep and
//! kept per waypoint; these are shared strings instead: cloning one is a
//! reference count. Each reads, compares
//! and prints as the string it holds (`w.thread_id == "trip-1"`,
//! `w.fingerprint == graph.fingerprint()`), and is stored as a plain string.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

macro_rules! shared_str {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(Arc<str>);

        impl $name {
            /// The string itself.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The shared string, as the engine holds it.
            pub(crate) fn shared(&self) -> &Arc<str> {
                &self.0
            }
        }

        impl Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.0, f)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(Arc::from(s))
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                $name(Arc::from(s))
            }
        }

        impl From<&String> for $name {
            fn from(s: &String) -> Self {
                $name(Arc::from(s.as_str()))
            }
        }

        impl From<Arc<str>> for $name {
            fn from(s: Arc<str>) -> Self {
                $name(s)
            }
        }

        impl From<$name> for Arc<str> {
            fn from(s: $name) -> Arc<str> {
                s.0
            }
        }

        impl From<$name> for String {
            fn from(s: $name) -> String {
                s.0.to_string()
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                &*self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                &*self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                *self.0 == **other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == &*other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == &*other.0
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                **self == *other.0
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                Ok($name(Arc::from(String::deserialize(d)?)))
            }
        }
    };
}

shared_str! {
    /// The thread a waypoint belongs to, shared by all of the run's
    /// waypoints. Reads and compares as the id string.
    ThreadId
}

shared_str! {
    /// The fingerprint of the graph that wrote a waypoint
    /// ([`WarGraph::fingerprint`](crate::graph::WarGraph::fingerprint)), shared by
    /// all of the run's waypoints. Reads and compares as the digest string.
    GraphFingerprint
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_compares_and_stores_as_its_string() {
        let id = ThreadId::from("trip-1");
        let copy = id.clone();
        assert!(Arc::ptr_eq(&id.0, &copy.0), "a clone shares the string");
        let (text, owned): (&str, String) = ("trip-1", "trip-1".into());
        assert_eq!(id, text);
        assert_eq!(text, id);
        assert_eq!(id, *text);
        assert_eq!(id, owned);
        assert_eq!(owned, id);
        assert_eq!(id.len(), 6);
        assert_eq!(format!("{id} {id:?}"), "trip-1 \"trip-1\"");
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, "\"trip-1\"");
        assert_eq!(serde_json::from_str::<ThreadId>(&json).unwrap(), id);
        let map: std::collections::HashMap<ThreadId, u8> = [(id, 1)].into();
        assert_eq!(map.get("trip-1"), Some(&1));
        assert_eq!(String::from(GraphFingerprint::from("v6:x")), "v6:x");
    }
}
