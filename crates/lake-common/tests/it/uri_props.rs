//! Properties of URI normalisation: one key, however it is spelled, normalises to one identity.

use arrow_array::{Array, StringArray};
use lake_common::{all_plain_keys, is_plain_key, normalize_reference, LakeRootUri, NormalizedReference};
use proptest::prelude::*;

fn segment() -> impl Strategy<Value = String> {
    "[A-Za-z0-9._ -]{1,8}".prop_filter("no dot segments", |s| s != "." && s != "..")
}

proptest! {
    /// The bulk check of a whole array agrees with checking every value, for arrays of keys that
    /// are mostly plain (dots and slashes placed anywhere) and for slices of them.
    #[test]
    fn the_bulk_plain_key_check_agrees_with_the_per_value_one(
        values in proptest::collection::vec(prop_oneof![
            "(objects/)?[A-Za-z0-9._/-]{0,12}|[A-Za-z0-9._ /%-]{0,6}",
            // Segments that break or nearly break the rules, joined by `/`.
            proptest::collection::vec(prop_oneof![Just(""), Just("."), Just(".."), Just("a"), Just(".h"), Just("x."), Just("01J")], 1..5)
                .prop_map(|segments| segments.join("/")),
        ], 0..12),
        skip in 0usize..3,
    ) {
        let array = StringArray::from_iter_values(values.iter());
        let skip = skip.min(array.len());
        let sliced = array.slice(skip, array.len() - skip);
        for a in [&array, &sliced] {
            let want = a.iter().all(|v| v.is_some_and(is_plain_key));
            prop_assert_eq!(all_plain_keys(a.value_data(), a.value_offsets()), want, "{:?}", a);
        }
    }

    /// The hot path's shortcut agrees with normalisation: a string it accepts as a plain key
    /// normalises to itself, inside the root (`is_plain_key` never accepts what normalisation
    /// would change or refuse).
    #[test]
    fn plain_keys_normalise_to_themselves(uri in "[A-Za-z0-9._/ %:?#-]{0,24}") {
        if is_plain_key(&uri) {
            let root = LakeRootUri::parse("/data/lake").unwrap();
            prop_assert_eq!(normalize_reference(&root, &uri).unwrap(), NormalizedReference::InRoot(uri.clone()));
        }
    }

    /// A key, its absolute `file://` and percent-encoded spellings, and (for S3) its `s3a://`
    /// and `s3n://` aliases normalise to the same key; normalising again changes nothing.
    #[test]
    fn spellings_of_one_key_normalise_to_it(segments in proptest::collection::vec(segment(), 1..4)) {
        let key = segments.join("/");
        let encoded: String = segments.iter().map(|s| percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()).collect::<Vec<_>>().join("/");
        let local = LakeRootUri::parse("/data/my lake").unwrap();
        let s3 = LakeRootUri::parse("s3://bucket/lake").unwrap();
        let want = NormalizedReference::InRoot(key.clone());
        prop_assert_eq!(normalize_reference(&local, &encoded).unwrap(), want.clone());
        prop_assert_eq!(normalize_reference(&local, &format!("file:///data/my%20lake/{encoded}")).unwrap(), want.clone());
        for scheme in ["s3", "s3a", "s3n", "S3"] {
            prop_assert_eq!(normalize_reference(&s3, &format!("{scheme}://bucket/lake/{encoded}")).unwrap(), want.clone());
        }
        let once = normalize_reference(&local, &encoded).unwrap().into_identity_uri();
        // A normalised key containing no `%` normalises to itself.
        if !once.contains('%') {
            prop_assert_eq!(normalize_reference(&local, &once).unwrap(), want);
        }
    }

    /// Appending `/`, doubling a `/`, or inserting a `..` or `.` segment is refused, never guessed.
    #[test]
    fn ambiguous_spellings_are_refused(segments in proptest::collection::vec(segment(), 2..4), at in 0usize..3) {
        let local = LakeRootUri::parse("/data/lake").unwrap();
        let at = at % (segments.len() - 1) + 1;
        let (a, b) = segments.split_at(at);
        for bad in [
            format!("{}/", segments.join("/")),
            format!("{}//{}", a.join("/"), b.join("/")),
            format!("{}/../{}", a.join("/"), b.join("/")),
            format!("{}/./{}", a.join("/"), b.join("/")),
        ] {
            prop_assert!(normalize_reference(&local, &bad).is_err(), "{} must be refused", bad);
        }
    }
}
