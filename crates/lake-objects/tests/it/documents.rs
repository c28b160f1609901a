//! Plans and checkpoints refuse edits, other formats and other plans.

use lake_objects::candidates::CandidateList;
use lake_objects::checkpoint::ApplyCheckpoint;
use lake_objects::plan::{BasisEntry, Candidate, GcPlan, PLAN_FORMAT_VERSION, STAGE_ORPHAN_OBJECTS};
use lake_objects::ObjectsError;

fn sample() -> GcPlan {
    GcPlan {
        format_version: PLAN_FORMAT_VERSION,
        stage: STAGE_ORPHAN_OBJECTS.into(),
        root: "file:///lake".into(),
        min_age_seconds: 604800,
        cutoff: "2026-01-01T00:00:00.000Z".into(),
        basis: vec![BasisEntry { table: "t".into(), version: 4 }],
        lineage_complete: true,
        problems: vec![],
        candidates: CandidateList::from_sorted(vec![Candidate {
            uri: "objects/01J00000000000000000000000/a".into(),
            size: 3,
            last_modified: "2025-12-01T00:00:00.000Z".into(),
        }]),
    }
}

#[test]
fn plan_documents_round_trip_and_refuse_edits() {
    let p = sample();
    let doc = p.to_document();
    assert_eq!(GcPlan::from_document(&doc, "p.json").unwrap(), p);
    let edited = String::from_utf8(doc.clone()).unwrap().replace("\"size\": 3", "\"size\": 4");
    assert!(edited.contains("\"size\": 4"));
    let err = GcPlan::from_document(edited.as_bytes(), "p.json").unwrap_err();
    assert!(err.to_string().contains("digest mismatch"), "{err}");
    let mut v: serde_json::Value = serde_json::from_slice(&doc).unwrap();
    v["plan"]["format_version"] = 9.into();
    assert!(GcPlan::from_document(&serde_json::to_vec(&v).unwrap(), "p.json")
        .unwrap_err()
        .to_string()
        .contains("format version 9"));
    assert!(matches!(GcPlan::from_document(b"{", "p.json"), Err(ObjectsError::Corrupt { .. })));
}

#[tokio::test]
async fn checkpoints_refuse_edits_and_other_formats() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.json");
    let loc = lake_objects::checkpoint::CheckpointLocation::from(path.as_path());
    assert!(ApplyCheckpoint::load(&loc).await.unwrap().is_none());
    let cp = ApplyCheckpoint::new(sample());
    cp.save(&loc).await.unwrap();
    assert_eq!(ApplyCheckpoint::load(&loc).await.unwrap().unwrap(), cp);

    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    v["plan"]["candidates"][0]["uri"] = "objects/01J00000000000000000000000/live".into();
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    let err = ApplyCheckpoint::load(&loc).await.unwrap_err();
    assert!(err.to_string().contains("edited"), "{err}");

    let mut v: serde_json::Value = serde_json::to_value(&cp).unwrap();
    v["format_version"] = 2.into();
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    assert!(ApplyCheckpoint::load(&loc).await.unwrap_err().to_string().contains("format version"));

    std::fs::write(&path, b"garbage").unwrap();
    assert!(matches!(ApplyCheckpoint::load(&loc).await, Err(ObjectsError::Checkpoint { .. })));
}
