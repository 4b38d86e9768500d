//! Thread ids on arbitrary text: `validate_thread_id` and
//! `validate_root_thread_id` never panic and agree with their rules; a
//! Battalion child id of a valid root reads back to its parent, node and
//! visit, is never a valid root id, and is storable while short enough.
//! Twin: `tests/store_props.rs`
//! (`battalion_children_never_collide_with_each_other_or_a_root`).
#![no_main]

use aegis::id::{BATTALION_SEPARATOR, MAX_THREAD_ID_BYTES, NodeId, battalion_thread_id, validate_root_thread_id, validate_thread_id};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let visit = u32::from(data[0]) + 1;
    let text = String::from_utf8_lossy(&data[1..]);
    let (root, node) = text.split_once('\u{fffd}').unwrap_or((&text, "n"));

    let storable = !root.is_empty() && root.len() <= MAX_THREAD_ID_BYTES && !root.contains('\0');
    assert_eq!(validate_thread_id(root).is_ok(), storable);
    assert_eq!(
        validate_root_thread_id(root).is_ok(),
        storable && !root.contains(BATTALION_SEPARATOR)
    );
    if validate_root_thread_id(root).is_err() {
        return;
    }
    let child = battalion_thread_id(root, &NodeId::new(node), visit);
    assert!(validate_root_thread_id(&child).is_err());
    assert_eq!(validate_thread_id(&child).is_ok(), child.len() <= MAX_THREAD_ID_BYTES);
    let (parent, last) = child.split_once(BATTALION_SEPARATOR).expect("a separator");
    assert_eq!(parent, root);
    let (escaped, suffix) = match last.split_once('#') {
        Some((n, v)) => (n, Some(v)),
        None => (last, None),
    };
    assert_eq!(suffix.map(|v| v.parse::<u32>().unwrap()), (visit > 1).then_some(visit));
    let mut bytes = Vec::new();
    let raw = escaped.as_bytes();
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' {
            bytes.push(u8::from_str_radix(std::str::from_utf8(&raw[i + 1..i + 3]).unwrap(), 16).unwrap());
            i += 3;
        } else {
            bytes.push(raw[i]);
            i += 1;
        }
    }
    assert_eq!(String::from_utf8(bytes).unwrap(), node);
});
