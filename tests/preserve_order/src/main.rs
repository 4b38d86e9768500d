//! Prints the fingerprint of the golden graph and the golden node cache
//! key, computed in a build where
//! serde_json's `preserve_order` is on (see `Cargo.toml`). The crate's
//! `fingerprint` test builds and runs this and compares.

mod golden;

fn main() {
    // Prove the feature is really on in this build: with `preserve_order` a
    // map keeps insertion order; without it, keys are sorted.
    let probe = serde_json::json!({"b": 1, "a": 2});
    let order: Vec<&str> = probe
        .as_object()
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    println!("map-order {}", order.join(","));
    println!("fingerprint {}", golden::golden_graph().fingerprint());
    println!("cache-key {}", golden::golden_cache_key());
}
