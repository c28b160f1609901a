//! Lance branches through the engine: a branch is a lineage of its own (`table@branch`), its
//! retained versions are GC roots, writes on it are journaled, and deleting it makes the
//! objects only it referenced orphans. A branch made by another client stays a problem.

use crate::gc_scenario::dry_run;
use crate::support::{batch, new_lake, new_s3_lake, reader, TestLake};
use crate::truth::planned_objects;
use chrono::Utc;
use lake_engine::{Engine, LineageProblem};
use lake_lance::branch::BranchSource;
use std::collections::BTreeSet;
use std::time::Duration;

/// A dry run at a cutoff after every upload so far: whether the lineage is complete, the
/// managed objects planned, and the problems.
async fn planned(lake: &TestLake) -> (bool, BTreeSet<String>, Vec<String>) {
    tokio::time::sleep(Duration::from_millis(20)).await;
    let plan = dry_run(lake, Utc::now(), 10).await;
    (plan.lineage_complete, planned_objects(&plan), plan.problems.into_iter().map(|p| p.message).collect())
}

async fn problems(lake: &TestLake) -> Vec<LineageProblem> {
    let mut all = Vec::new();
    let tables = lake.engine.tables().await.unwrap();
    all.extend(tables.problems.clone());
    for location in &tables.tables {
        all.extend(lake.engine.snapshot(location).await.unwrap().lineage().clone().problems);
    }
    all
}

#[tokio::test(flavor = "multi_thread")]
async fn a_branch_is_a_journaled_lineage_whose_versions_keep_their_objects() {
    branch_lifecycle(new_lake().await).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
async fn a_branch_on_s3_is_a_journaled_lineage_whose_versions_keep_their_objects() {
    branch_lifecycle(new_s3_lake("branches").await).await;
}

/// A branch created, written on, outliving main's cleanup, and deleted.
async fn branch_lifecycle(lake: TestLake) {
    let a = lake.upload("a.bin", b"on main, then only on the branch").await;
    let b = lake.upload("b.bin", b"written on the branch").await;
    let c = lake.upload("c.bin", b"on main").await;
    lake.engine.append("t", reader(vec![batch(&[("e1", Some(&a)), ("e2", Some(&c))])])).await.unwrap();

    let first = lake.engine.create_branch("t", "exp", &BranchSource::Version(1)).await.unwrap();
    assert_eq!((first.table.as_str(), first.version, first.references_added), ("t@exp", 1, 2));
    assert_eq!(lake.engine.branches("t").await.unwrap(), vec!["exp".to_string()]);
    assert_eq!(problems(&lake).await, vec![], "a registered branch is a lineage, not a problem");
    let out = lake.engine.append("t@exp", reader(vec![batch(&[("e3", Some(&b))])])).await.unwrap();
    assert_eq!((out.version, out.references_added), (2, 1));
    lake.engine.delete("t@exp", "episode = 'e2'").await.unwrap().unwrap();
    // Main forgets `a`; only the branch still references it.
    lake.engine.delete("t", "episode = 'e1'").await.unwrap().unwrap();
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
    let (complete, candidates, problems) = planned(&lake).await;
    assert!(complete, "{problems:?}");
    assert!(candidates.is_empty(), "every object is referenced by main or the branch: {candidates:?}");

    // A write on a branch that does not exist is refused (branches come from create_branch).
    assert!(lake.engine.append("t@nope", reader(vec![batch(&[("e", Some(&b))])])).await.is_err());

    // Deleting the branch leaves `b` to GC, and `a` once main's version 1 (which Lance's
    // cleanup kept while the branch was made from it) is cleaned up; `c` stays on main.
    lake.engine.delete_branch("t", "exp").await.unwrap();
    assert!(lake.engine.branches("t").await.unwrap().is_empty());
    let (complete, candidates, problems) = planned(&lake).await;
    assert!(complete, "{problems:?}");
    assert_eq!(candidates, BTreeSet::from([b.key.clone()]));
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    let (complete, candidates, problems) = planned(&lake).await;
    assert!(complete, "{problems:?}");
    assert_eq!(candidates, BTreeSet::from([a.key.clone(), b.key.clone()]));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_branch_from_a_tag_and_a_foreign_branch() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    lake.engine.append("t", reader(vec![batch(&[("e1", Some(&a))])])).await.unwrap();
    lake.engine.create_tag("t", 1, "v1").await.unwrap();
    lake.engine.append("t", reader(vec![batch(&[("e2", None)])])).await.unwrap();
    let first = lake.engine.create_branch("t", "from-tag", &BranchSource::Tag("v1".into())).await.unwrap();
    assert_eq!(first.version, 1);
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
    // Branches of branches and bad names are refused.
    assert!(lake.engine.create_branch("t@from-tag", "x", &BranchSource::Version(1)).await.is_err());
    assert!(lake.engine.create_branch("t", "a/b", &BranchSource::Version(1)).await.is_err());

    // Another client's branch is not journaled: a problem until it is gone.
    let mut ds = lance::Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    ds.create_branch("foreign", 2, None).await.unwrap();
    let found = problems(&lake).await;
    assert_eq!(found, vec![LineageProblem::Branch { table: "t".into(), branch: "foreign".into() }]);
    // The engine does not write to a branch it did not register (docs/protocol.md, "Branches"):
    // refused before anything is written.
    let refused = lake.engine.append("t@foreign", reader(vec![batch(&[("e9", None)])])).await;
    assert!(
        matches!(&refused, Err(lake_lance::LanceEngineError::InvalidInput(m)) if m.contains("not registered")),
        "{refused:?}"
    );
    assert_eq!(ds.checkout_branch("foreign").await.unwrap().version().version, 2, "nothing was committed");
    ds.delete_branch("foreign").await.unwrap();
    assert_eq!(problems(&lake).await, vec![]);
}
