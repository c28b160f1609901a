//! Plans and checkpoints refuse edits, other formats and other plans.

use lake_gc::candidates::CandidateList;
use lake_gc::checkpoint::{ApplyCheckpoint, CheckpointLocation};
use lake_gc::plan::{BasisEntry, Candidate, GcPlan, PLAN_FORMAT_VERSION, STAGE_ORPHAN_OBJECTS};
use lake_gc::GcError;

fn sample() -> GcPlan {
    GcPlan {
        format_version: PLAN_FORMAT_VERSION,
        stage: STAGE_ORPHAN_OBJECTS.into(),
        root: "file:///lake".into(),
        lake_id: None,
        min_age_seconds: 604800,
        cutoff: "2026-01-01T00:00:00.000Z".parse().unwrap(),
        basis: vec![BasisEntry::new(
            "t",
            lake_engine::LineageBasis {
                version: 4,
                retained: vec![3, 4],
                journal_sha256: "0".repeat(64),
                manifests: [(3, "10:a".to_string()), (4, "12:b".to_string())].into_iter().collect(),
            },
        )],
        lineage_complete: true,
        foreign_count: 0,
        foreign: vec![],
        problems: vec![],
        shard: None,
        mode: None,
        candidates: CandidateList::from_sorted(vec![Candidate {
            key: "objects/01J00000000000000000000000/a".into(),
            size: 3,
            last_modified: "2025-12-01T00:00:00.000Z".parse().unwrap(),
        }]),
    }
}

/// The canonical bytes of `sample()` as builds before typed plans (2cee1bc and earlier, format
/// 3) wrote them, field by field: typing the plan in memory changed no byte of a plan without
/// problems, so its digest, and every plan document and checkpoint written by those builds, still
/// hold.
const SAMPLE_CANONICAL: &str = concat!(
    r#"{"format_version":3,"stage":"orphan_objects","root":"file:///lake","min_age_seconds":604800,"#,
    r#""cutoff":"2026-01-01T00:00:00.000Z","basis":[{"table":"t","version":4,"retained":[3,4],"#,
    r#""journal_sha256":"0000000000000000000000000000000000000000000000000000000000000000","#,
    r#""manifests":{"3":"10:a","4":"12:b"}}],"lineage_complete":true,"problems":[],"foreign_count":0,"#,
    r#""foreign":[],"candidates":[{"uri":"objects/01J00000000000000000000000/a","size":3,"#,
    r#""last_modified":"2025-12-01T00:00:00.000Z"}]}"#
);

#[test]
fn a_plan_without_problems_has_the_bytes_of_earlier_builds() {
    let p = sample();
    assert_eq!(String::from_utf8(p.canonical_bytes().unwrap()).unwrap(), SAMPLE_CANONICAL);
    use sha2::Digest;
    assert_eq!(p.digest().unwrap(), hex::encode(sha2::Sha256::digest(SAMPLE_CANONICAL.as_bytes())));
    // A document an earlier build wrote (its digest over those bytes) reads back as `sample()`.
    let doc = format!(
        r#"{{"digest":"{}","plan":{SAMPLE_CANONICAL}}}"#,
        hex::encode(sha2::Sha256::digest(SAMPLE_CANONICAL.as_bytes()))
    );
    assert_eq!(GcPlan::from_document(doc.as_bytes(), "old.json").unwrap(), p);
}

#[test]
fn plan_documents_round_trip_and_refuse_edits() {
    let p = sample();
    let doc = p.to_document().unwrap();
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
    assert!(matches!(
        GcPlan::from_document(b"{", "p.json"),
        Err(lake_gc::GcError::Store(lake_store::StoreError::Corrupt { .. }))
    ));
}

#[tokio::test]
async fn checkpoints_keep_their_plan_beside_them_and_refuse_edits_and_other_formats() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.json");
    let plan_path = dir.path().join("c.json.plan.json");
    let loc = CheckpointLocation::from(path.as_path());
    assert!(ApplyCheckpoint::load(&loc).await.unwrap().is_none());
    let plan = sample();
    let cp = ApplyCheckpoint::new(&plan).unwrap();

    // A checkpoint whose plan document is missing is refused, naming the document.
    cp.save(&loc.to_read().unwrap()).await.unwrap();
    let err = ApplyCheckpoint::load(&loc).await.unwrap_err().to_string();
    assert!(err.contains("c.json.plan.json") && err.contains("missing"), "{err}");

    ApplyCheckpoint::persist_plan(&plan, &loc.to_read().unwrap()).await.unwrap();
    let loaded = ApplyCheckpoint::load(&loc).await.unwrap().unwrap();
    assert_eq!((&loaded.checkpoint, &loaded.plan), (&cp, &plan));
    // The plan document is the `--out` document; the checkpoint holds no candidate.
    assert_eq!(std::fs::read(&plan_path).unwrap(), plan.to_document().unwrap());
    assert!(!std::fs::read_to_string(&path).unwrap().contains("objects/"));

    // A plan document edited in place no longer matches its own digest.
    let mut v: serde_json::Value = serde_json::from_slice(&plan.to_document().unwrap()).unwrap();
    v["plan"]["candidates"][0]["uri"] = "objects/01J00000000000000000000000/live".into();
    std::fs::write(&plan_path, serde_json::to_vec(&v).unwrap()).unwrap();
    let err = ApplyCheckpoint::load(&loc).await.unwrap_err().to_string();
    assert!(err.contains("plan document is not valid") && err.contains("edited"), "{err}");

    // Another valid plan put in its place does not match the checkpoint's digest.
    let mut other = sample();
    other.min_age_seconds += 1;
    std::fs::write(&plan_path, other.to_document().unwrap()).unwrap();
    let err = ApplyCheckpoint::load(&loc).await.unwrap_err().to_string();
    assert!(err.contains("bound to") && err.contains("edited"), "{err}");
    ApplyCheckpoint::persist_plan(&plan, &loc.to_read().unwrap()).await.unwrap();

    // A checkpoint whose candidate count was edited.
    let mut v: serde_json::Value = serde_json::to_value(&cp).unwrap();
    v["candidates"] = 2.into();
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    assert!(ApplyCheckpoint::load(&loc).await.unwrap_err().to_string().contains("records 2 candidates"));

    let mut v: serde_json::Value = serde_json::to_value(&cp).unwrap();
    v["format_version"] = 9.into();
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    assert!(ApplyCheckpoint::load(&loc).await.unwrap_err().to_string().contains("format version"));

    std::fs::write(&path, b"garbage").unwrap();
    assert!(matches!(ApplyCheckpoint::load(&loc).await, Err(GcError::Checkpoint { .. })));
}

/// Checkpoints of earlier builds (format 1: the plan embedded; format 2: a plan without the
/// lineage basis beside it) are refused with a sentence that says what to do; so is an old plan.
#[tokio::test]
async fn checkpoints_and_plans_of_earlier_builds_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.json");
    let loc = CheckpointLocation::from(path.as_path());
    let plan = sample();
    for format in [1, 2] {
        let old = serde_json::json!({
            "format_version": format,
            "plan_digest": plan.digest().unwrap(),
            "plan": plan,
            "next_index": 1,
            "deleted": 1,
            "already_gone": 0,
            "failed": [],
            "revived": [],
            "complete": false,
        });
        std::fs::write(&path, serde_json::to_vec_pretty(&old).unwrap()).unwrap();
        let err = ApplyCheckpoint::load(&loc).await.unwrap_err().to_string();
        assert!(err.contains("earlier lake build") && err.contains("new plan"), "{err}");
    }
    let mut old_plan = serde_json::to_value(&plan).unwrap();
    old_plan["format_version"] = 1.into();
    old_plan["basis"] = serde_json::json!([{"table": "t", "version": 4}]);
    let doc = serde_json::json!({"digest": "x", "plan": old_plan});
    let err = GcPlan::from_document(&serde_json::to_vec(&doc).unwrap(), "old-plan.json").unwrap_err();
    assert!(err.to_string().contains("not a valid GC plan"), "{err}");
}
