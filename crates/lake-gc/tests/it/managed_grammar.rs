//! The managed key grammar moved to `lake_common::is_managed_key`, which writes check new
//! references against; `keys::parse_managed_key` (what GC considers) uses it. This property test
//! holds the two to the grammar GC used before: 26 characters of digits or upper-case letters
//! that the `ulid` crate parses and prints back the same, then a name of 1 to 200 characters of
//! `[A-Za-z0-9._-]` not starting with `.`.

use lake_store::keys::parse_managed_key;
use proptest::prelude::*;
use ulid::Ulid;

/// The grammar as `keys.rs` spelled it before the move.
fn earlier_grammar(key: &str) -> bool {
    let Some(rest) = key.strip_prefix("objects/") else { return false };
    let Some((ulid_text, name)) = rest.split_once('/') else { return false };
    let name_ok = !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    ulid_text.len() == 26
        && ulid_text.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
        && name_ok
        && Ulid::from_string(ulid_text).is_ok_and(|u| u.to_string() == ulid_text)
}

fn key() -> impl Strategy<Value = String> {
    // ULID-like segments over every letter (I, L, O, U and lower case included), every first
    // character, and names near the rules' edges.
    let ulid = "[0-9A-Za-z]{24,27}";
    let name = prop_oneof!["[A-Za-z0-9._-]{0,3}", "[.a-z ]{1,3}", "[a-z]{199,201}", "[a-z]/[a-z]"];
    (prop_oneof![Just("objects/"), Just("objects"), Just("tables/")], ulid, name)
        .prop_map(|(prefix, ulid, name)| format!("{prefix}{ulid}/{name}"))
}

proptest! {
    #[test]
    fn the_grammar_is_the_one_gc_used(key in key()) {
        prop_assert_eq!(lake_common::is_managed_key(&key), earlier_grammar(&key), "{}", key);
        prop_assert_eq!(parse_managed_key(&key).is_some(), earlier_grammar(&key), "{}", key);
    }

    #[test]
    fn every_minted_key_is_managed(ms in 0u64..(1 << 48), random in any::<u128>(), name in "[A-Za-z0-9_-][A-Za-z0-9._-]{0,30}") {
        let key = format!("objects/{}/{name}", Ulid::from_parts(ms, random));
        prop_assert!(lake_common::is_managed_key(&key));
        prop_assert!(earlier_grammar(&key));
    }
}
