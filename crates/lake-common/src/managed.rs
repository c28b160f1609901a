//! The managed key grammar and the rule every write applies to the references it adds.
//!
//! A managed object's key is `objects/<ULID>/<name>` ([`is_managed_key`]):
//! - `<ULID>`: 26 characters of Crockford base 32 in canonical form (digits and the upper-case
//!   letters other than I, L, O and U; the first character at most `7`, since a ULID is 128
//!   bits), minted when the upload starts;
//! - `<name>`: 1 to 200 characters of `[A-Za-z0-9._-]`, not starting with `.`.
//!
//! GC considers only keys of this form (`lake_store::keys` parses them with this function), so
//! a reference to any other key inside the lake root can only name an object through another
//! route (a symbolic link, a key with a trailing space that some store or tool maps to the
//! object, a table's own file): GC cannot tell which object it reaches, and a plan of a lake
//! holding one is incomplete. The rule that keeps such a reference out of the lake
//! ([`check_new_reference`]): every reference a write adds is either external (outside the lake
//! root) or a managed key. Reads (scans, repair, verification) do not apply it: they describe
//! what a version holds, whoever wrote it.

use crate::error::UriError;
use crate::uri::is_external_identity;
use crate::MANAGED_PREFIX;

/// The longest `<name>` of a managed key, in bytes.
pub const MAX_MANAGED_NAME_BYTES: usize = 200;

/// What a managed key looks like, for error messages.
pub const MANAGED_KEY_GRAMMAR: &str = "objects/<ULID>/<name> (a ULID of 26 upper-case Crockford base-32 characters, then a name of 1 to 200 characters of A-Z a-z 0-9 . _ - not starting with `.`), the key an upload through lake returned";

/// True for a Crockford base-32 digit in canonical (upper-case) form.
const fn crockford(b: u8) -> bool {
    matches!(b, b'0'..=b'9' | b'A'..=b'H' | b'J' | b'K' | b'M' | b'N' | b'P'..=b'T' | b'V'..=b'Z')
}

/// True for a byte of a managed key's `<name>`.
const fn name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

/// [`crockford`] and [`name_byte`] of every byte, as bits 1 and 2: every write and every
/// journaled append checks each reference's 26 ULID digits and name, so a table lookup per byte
/// replaces the chains of range comparisons (`is_canonical_ulid` was a quarter of a two-phase
/// commit's CPU before).
const CLASS: [u8; 256] = {
    let mut class = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        class[b] = (crockford(b as u8) as u8) | ((name_byte(b as u8) as u8) << 1);
        b += 1;
    }
    class
};

/// True when `ulid` is a ULID in canonical form: 26 Crockford digits, the first at most `7`.
pub fn is_canonical_ulid(ulid: &[u8]) -> bool {
    // Branch-free over the digits (an `&` fold, not a short-circuit) so the compiler unrolls it.
    ulid.len() == 26 && ulid[0] <= b'7' && ulid.iter().fold(true, |ok, b| ok & (CLASS[*b as usize] & 1 != 0))
}

/// True when `name` is the `<name>` of a managed key.
pub fn is_managed_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= MAX_MANAGED_NAME_BYTES
        && name[0] != b'.'
        && name.iter().fold(true, |ok, b| ok & (CLASS[*b as usize] & 2 != 0))
}

/// True when `key` (relative to the lake root) matches the managed key grammar exactly (see the
/// module documentation). No allocation.
pub fn is_managed_key(key: &str) -> bool {
    is_managed_key_bytes(key.as_bytes())
}

/// [`is_managed_key`] of bytes: the grammar is ASCII, so bytes that are not UTF-8 fail it as
/// they are, without a UTF-8 check first.
fn is_managed_key_bytes(bytes: &[u8]) -> bool {
    let prefix = MANAGED_PREFIX.as_bytes();
    // `objects/` + 26 + `/` + at least one name byte.
    if bytes.len() < prefix.len() + 29 || !bytes.starts_with(prefix) || bytes[prefix.len()] != b'/' {
        return false;
    }
    let ulid_start = prefix.len() + 1;
    let (ulid, rest) = bytes[ulid_start..].split_at(26);
    is_canonical_ulid(ulid) && rest[0] == b'/' && is_managed_name(&rest[1..])
}

/// The rule every write applies to each reference it adds: `identity_uri` (a normalised
/// reference: an external URI, or a key relative to the root) must be external or a managed key.
/// `written` is the row's value as written, for the message.
///
/// # Errors
/// [`UriError::NotManaged`] naming the row's value, the key it names and what a valid reference
/// is.
pub fn check_new_reference(written: &str, identity_uri: &str) -> Result<(), UriError> {
    if is_external_identity(identity_uri) || is_managed_key(identity_uri) {
        return Ok(());
    }
    Err(UriError::NotManaged { uri: written.to_string(), key: identity_uri.to_string() })
}

/// True when every value of a Utf8 array (its `values` buffer cut at `offsets`) is a managed key
/// ([`is_managed_key`]): one pass, no allocation. Values that are not UTF-8 or offsets out of
/// bounds answer false.
pub fn all_managed_keys(values: &[u8], offsets: &[i32]) -> bool {
    offsets.windows(2).all(|w| {
        let (Ok(a), Ok(b)) = (usize::try_from(w[0]), usize::try_from(w[1])) else { return false };
        values.get(a..b).is_some_and(is_managed_key_bytes)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ULID: &str = "01J9ZJ4G6W8X1Y2Z3A4B5C6D7E";

    #[test]
    fn the_grammar_of_managed_keys() {
        let good = [
            format!("objects/{ULID}/a"),
            format!("objects/{ULID}/episode_1.mcap"),
            format!("objects/{ULID}/{}", "x".repeat(200)),
            "objects/7ZZZZZZZZZZZZZZZZZZZZZZZZZ/a-b.c_d".to_string(),
            "objects/00000000000000000000000000/0".to_string(),
        ];
        for key in &good {
            assert!(is_managed_key(key), "{key}");
        }
        let bad = [
            format!("objects/{ULID}/a "),
            format!(" objects/{ULID}/a"),
            format!("objects/{ULID}"),
            format!("objects/{ULID}/"),
            format!("objects/{ULID}/a/b"),
            format!("objects/{ULID}/.a"),
            format!("objects/{ULID}/a b"),
            format!("objects/{ULID}/{}", "x".repeat(201)),
            format!("objects/{}/a", ULID.to_lowercase()),
            format!("objects/{}/a", &ULID[..25]),
            format!("objects/{ULID}0/a"),
            format!("objectsx/{ULID}/a"),
            format!("tables/{ULID}/a"),
            format!("_lake/{ULID}/a"),
            "objects/80000000000000000000000000/a".to_string(),
            "objects/0000000000000000000000000I/a".to_string(),
            "objects/0000000000000000000000000L/a".to_string(),
            "objects/0000000000000000000000000O/a".to_string(),
            "objects/0000000000000000000000000U/a".to_string(),
            "objects/x".to_string(),
            "objects/".to_string(),
            String::new(),
        ];
        for key in &bad {
            assert!(!is_managed_key(key), "{key:?}");
        }
    }

    #[test]
    fn new_references_are_external_or_managed() {
        assert!(check_new_reference("s3://other/x", "s3://other/x").is_ok());
        assert!(check_new_reference("x", &format!("objects/{ULID}/a")).is_ok());
        for key in ["objects/x", "tables/t.lance/data/f.lance", "_lake/lake.json", "alias/x"] {
            let err = check_new_reference(key, key).unwrap_err();
            assert!(matches!(&err, UriError::NotManaged { key: k, .. } if k == key), "{err}");
            assert!(err.to_string().contains("objects/<ULID>/<name>"), "{err}");
        }
        // The row's value is shown escaped, so a trailing space is visible.
        let spaced = format!("objects/{ULID}/a ");
        let err = check_new_reference(&spaced, &spaced).unwrap_err();
        assert!(err.to_string().contains(&format!("\"objects/{ULID}/a \"")), "{err}");
    }

    #[test]
    fn arrays_of_keys_are_checked_in_one_pass() {
        let keys = [format!("objects/{ULID}/a"), format!("objects/{ULID}/bb")];
        let values: Vec<u8> = keys.iter().flat_map(|k| k.bytes()).collect();
        let offsets = [0, keys[0].len() as i32, values.len() as i32];
        assert!(all_managed_keys(&values, &offsets));
        assert!(all_managed_keys(&[], &[0]));
        assert!(!all_managed_keys(&values, &[0, 3, values.len() as i32]));
        assert!(!all_managed_keys(&values, &[0, values.len() as i32 + 1]));
        // Bytes that are not UTF-8 (or not ASCII) fail the grammar in the ULID and in the name.
        let good = format!("objects/{ULID}/a").into_bytes();
        assert!(all_managed_keys(&good, &[0, good.len() as i32]));
        for (at, byte) in [(good.len() - 1, 0xffu8), (10, 0xc3), (good.len() - 1, b'/')] {
            let mut value = good.clone();
            value[at] = byte;
            assert!(!all_managed_keys(&value, &[0, value.len() as i32]), "{value:?}");
        }
    }

    /// The lookup table answers as the grammar's own predicates, byte for byte.
    #[test]
    fn the_byte_classes_match_the_grammar() {
        for b in 0..=255u8 {
            assert_eq!(CLASS[b as usize] & 1 != 0, crockford(b), "{b}");
            assert_eq!(CLASS[b as usize] & 2 != 0, name_byte(b), "{b}");
            let ulid = [b; 26];
            assert_eq!(is_canonical_ulid(&ulid), b <= b'7' && crockford(b), "{b}");
            assert_eq!(is_managed_name(&[b]), b != b'.' && name_byte(b), "{b}");
        }
    }
}
