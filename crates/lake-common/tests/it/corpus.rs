//! The bad-input corpus of reference spellings (`tests/corpus/references.tsv`): every case
//! normalises to the expected key or external URI, or is refused.

use lake_common::{normalize_reference, LakeRootUri, NormalizedReference};

#[test]
fn every_reference_spelling_in_the_corpus_normalises_as_recorded() {
    let corpus = include_str!("../corpus/references.tsv");
    let mut cases = 0;
    for (n, line) in corpus.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 3, "line {}: {line:?}", n + 1);
        let (root, uri, expected) = (fields[0], fields[1], fields[2]);
        let root = LakeRootUri::parse(root).unwrap();
        let got = normalize_reference(&root, uri);
        match expected.split_once(' ') {
            Some(("key", key)) => {
                assert_eq!(got.ok(), Some(NormalizedReference::InRoot(key.into())), "line {}: {uri}", n + 1)
            }
            Some(("external", ext)) => {
                assert_eq!(got.ok(), Some(NormalizedReference::External(ext.into())), "line {}: {uri}", n + 1)
            }
            _ if expected == "refused" => assert!(got.is_err(), "line {}: {uri} must be refused, got {got:?}", n + 1),
            _ => panic!("line {}: unknown expectation {expected:?}", n + 1),
        }
        cases += 1;
    }
    assert!(cases >= 40, "{cases} cases");
}
