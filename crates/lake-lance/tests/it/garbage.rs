//! Garbage that killed operations leave behind, and settings and tags that mislead: on real Lance
//! datasets.
//!
//! - A restore killed after tagging its source leaves `lake-restore-*`, which pins the old
//!   version (and its objects) for good: it is reported, and removed once no restore can still
//!   commit under it (by `lake cleanup`, or the next restore).
//! - Tags of a branch are shown, created and deleted only on the branch's lineage (`t@b`), never
//!   on the main line's version of the same number, nor the reverse; Lance's cleanup and GC
//!   agree.
//! - A second client's config change that turns on Lance's auto-cleanup is a named lineage
//!   problem from its commit on, with the command that unsets it.

use crate::gc_scenario::dry_run;
use crate::support::{apply_fresh, batch, new_lake, reader, TestLake};
use chrono::Utc;
use lake_gc::apply::ApplyOptions;
use lake_lance::branch::BranchSource;
use lake_lance::history::RESTORE_TAG_PREFIX;
use lake_store::failpoint;
use lance::Dataset;
use std::collections::BTreeSet;
use std::time::Duration;

fn candidates(plan: &lake_gc::plan::GcPlan) -> BTreeSet<String> {
    plan.candidates.keys().unwrap().into_iter().collect()
}

async fn cutoff_now() -> chrono::DateTime<Utc> {
    tokio::time::sleep(Duration::from_millis(15)).await;
    let cutoff = Utc::now();
    tokio::time::sleep(Duration::from_millis(15)).await;
    cutoff
}

async fn versions_of(lake: &TestLake, table: &str) -> Vec<u64> {
    lake.engine.versions(table).await.unwrap().iter().map(|v| v.version).collect()
}

/// The tags the engine shows on each version of `table`.
async fn tags_of(lake: &TestLake, table: &str) -> Vec<(u64, Vec<String>)> {
    lake.engine.versions(table).await.unwrap().into_iter().map(|v| (v.version, v.tags)).collect()
}

/// `t`: version 1 references `a`; version 2 deletes its row.
async fn lake_with_old_version() -> (TestLake, lake_store::writer::ManagedObject) {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"only version 1 references a").await;
    lake.engine.append("t", reader(vec![batch(&[("old", Some(&a)), ("keep", None)])])).await.unwrap();
    lake.engine.delete("t", "episode = 'old'").await.unwrap().unwrap();
    (lake, a)
}

/// The input: a restore killed after its tag and before its commit (failure point
/// `restore.after_tag`). Earlier builds left the tag for good: version 1 was never cleaned up
/// and `a` never collected, and nothing reported it. The tag is now shown as a restore's, kept
/// while its restore could still commit (`lake cleanup` leaves it), and removed once stale
/// (the lake's floor + 2 x margin + the 5-minute commit deadline after the restore began: 95
/// minutes for the 1-hour floor); then version 1 goes and `a` is collected.
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_killed_after_its_tag_is_reported_and_its_tag_removed_once_stale() {
    let (lake, a) = lake_with_old_version().await;
    let killed = failpoint::scope("restore.after_tag", lake.engine.restore("t", 1)).await;
    assert!(killed.unwrap_err().to_string().contains("restore.after_tag"));
    assert_eq!(versions_of(&lake, "t").await, vec![1, 2], "nothing was committed");
    let versions = lake.engine.versions("t").await.unwrap();
    let tag = versions[0].tags.first().cloned().expect("the killed restore's tag");
    assert!(tag.starts_with(RESTORE_TAG_PREFIX), "{tag}");
    assert_eq!(versions[0].restore_tags.len(), 1);
    assert!(!versions[0].restore_tags[0].stale, "a restore that began just now may still commit");
    // While its restore could still commit, the tag stays: cleanup keeps version 1.
    let cleaned = lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert!(cleaned.stale_restore_tags.is_empty());
    assert_eq!(versions_of(&lake, "t").await, vec![1, 2]);
    assert!(!candidates(&dry_run(&lake, cutoff_now().await, 10).await).contains(&a.key));
    // Past 95 minutes (floor one hour) it is stale: reported, then removed.
    let later = Utc::now() + chrono::Duration::minutes(96);
    let reported = lake.engine.restore_tags("t", later).await.unwrap();
    assert_eq!((reported.len(), reported[0].stale, reported[0].version), (1, true, 1));
    let at = Utc::now() + chrono::Duration::minutes(94);
    assert!(lake.engine.remove_stale_restore_tags("t", at).await.unwrap().is_empty(), "not stale before 95 minutes");
    let removed = lake.engine.remove_stale_restore_tags("t", later).await.unwrap();
    assert_eq!(removed.iter().map(|t| t.name.clone()).collect::<Vec<_>>(), vec![tag]);
    assert!(tags_of(&lake, "t").await.iter().all(|(_, tags)| tags.is_empty()));
    // Removing a stale tag commits a fence (version 3): a restore still running under the tag
    // can no longer land. Cleanup then removes versions 1 and 2.
    assert_eq!(versions_of(&lake, "t").await, vec![1, 2, 3]);
    let cleaned = lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_eq!(cleaned.old_versions, 2);
    assert_eq!(candidates(&dry_run(&lake, cutoff_now().await, 10).await), BTreeSet::from([a.key.clone()]));
}

/// A stale tag of a restore killed long ago (its ULID 2 hours old, floor 1 hour) is removed by
/// `lake cleanup` itself (the store's clock) and by the next restore of the lineage (on retry),
/// which then succeeds and removes its own tag; a user's tag and a fresh restore tag stay.
#[tokio::test(flavor = "multi_thread")]
async fn stale_restore_tags_are_removed_by_cleanup_and_by_the_next_restore() {
    let (lake, a) = lake_with_old_version().await;
    let ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    let old = |minutes: i64| {
        let ms = (Utc::now() - chrono::Duration::minutes(minutes)).timestamp_millis() as u64;
        format!("{RESTORE_TAG_PREFIX}{}", ulid::Ulid::from_parts(ms, 7).to_string().to_lowercase())
    };
    let (stale, fresh) = (old(120), old(10));
    ds.tags().create(&stale, 1).await.unwrap();
    ds.tags().create(&fresh, 1).await.unwrap();
    lake.engine.create_tag("t", 1, "release").await.unwrap();
    let cleaned = lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_eq!(cleaned.stale_restore_tags.iter().map(|t| t.name.clone()).collect::<Vec<_>>(), vec![stale.clone()]);
    assert_eq!(tags_of(&lake, "t").await[0].1, vec![fresh.clone(), "release".to_string()]);
    ds.tags().create(&stale, 1).await.unwrap();
    let restored = lake.engine.restore("t", 1).await.unwrap();
    assert_eq!(restored.references_added, 1);
    let tags: Vec<String> = tags_of(&lake, "t").await.into_iter().flat_map(|(_, t)| t).collect();
    assert_eq!(tags, vec![fresh, "release".to_string()], "the retry removed the stale tag and its own");
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
    assert!(!candidates(&dry_run(&lake, cutoff_now().await, 10).await).contains(&a.key));
}

/// `t`: v1 [a], v2 [a, m], v3 [a] (m's row deleted). Branch `b` of v1, then its version 2 adds
/// `y`. Tags: `onb` on `t@b` version 2, `onmain` on `t` version 1.
async fn lake_with_branch_tags() -> (TestLake, [lake_store::writer::ManagedObject; 3]) {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"main, every version").await;
    let m = lake.upload("m.bin", b"main version 2 only").await;
    let y = lake.upload("y.bin", b"branch version 2").await;
    lake.engine.append("t", reader(vec![batch(&[("a", Some(&a))])])).await.unwrap();
    lake.engine.append("t", reader(vec![batch(&[("m", Some(&m))])])).await.unwrap();
    lake.engine.delete("t", "episode = 'm'").await.unwrap().unwrap();
    lake.engine.create_branch("t", "b", &BranchSource::Version(1)).await.unwrap();
    let on_branch = lake.engine.append("t@b", reader(vec![batch(&[("y", Some(&y))])])).await.unwrap();
    assert_eq!(on_branch.version, 2, "the branch's version 2, main's has the same number");
    lake.engine.create_tag("t@b", 2, "onb").await.unwrap();
    lake.engine.create_tag("t", 1, "onmain").await.unwrap();
    (lake, [a, m, y])
}

/// The input: `lake versions --table t` showed the branch's tag `onb` on main's version
/// 2 (and `t@b` showed main's tags), so a user trusting it lost main's version 2 to
/// `lake cleanup`; `lake tag --table t --delete onb` deleted the branch's tag. Each lineage now
/// shows only its own tags, and deleting or creating a tag of another lineage is refused with
/// where it points. Lance's cleanup and GC agree with what is shown: main's version 2 is not
/// pinned (its object goes), the branch's tagged version 2 is (its object stays).
#[tokio::test(flavor = "multi_thread")]
async fn tags_of_a_branch_are_shown_and_changed_only_on_its_lineage() {
    let (lake, [a, m, y]) = lake_with_branch_tags().await;
    assert_eq!(
        tags_of(&lake, "t").await,
        vec![(1, vec!["onmain".to_string()]), (2, vec![]), (3, vec![])],
        "main's version 2 is not tagged"
    );
    assert_eq!(tags_of(&lake, "t@b").await, vec![(1, vec![]), (2, vec!["onb".to_string()])]);
    let refused = lake.engine.delete_tag("t", "onb").await.unwrap_err().to_string();
    assert!(refused.contains("version 2 of `t@b`") && refused.contains("nothing was changed"), "{refused}");
    assert!(refused.contains("Name the table `t@b`"), "{refused}");
    assert_eq!(tags_of(&lake, "t@b").await[1].1, vec!["onb".to_string()], "the branch's tag is still there");
    let refused = lake.engine.delete_tag("t@b", "onmain").await.unwrap_err().to_string();
    assert!(refused.contains("version 1 of `t`"), "{refused}");
    let refused = lake.engine.create_tag("t", 2, "onb").await.unwrap_err().to_string();
    assert!(refused.contains("already exists") && refused.contains("version 2 of `t@b`"), "{refused}");
    let refused = lake.engine.create_branch("t", "c", &BranchSource::Tag("onb".into())).await.unwrap_err();
    assert!(refused.to_string().contains("not a version of `t`"), "{refused}");
    // Cleanup of the main line keeps its own tagged version 1 and the latest, not version 2.
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    lake.engine.cleanup("t@b", Duration::ZERO).await.unwrap();
    assert_eq!(versions_of(&lake, "t").await, vec![1, 3]);
    assert_eq!(versions_of(&lake, "t@b").await, vec![2]);
    let plan = dry_run(&lake, cutoff_now().await, 10).await;
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    assert_eq!(candidates(&plan), BTreeSet::from([m.key.clone()]), "y (tagged on the branch) and a stay live");
    apply_fresh(&lake, &plan, &ApplyOptions::default()).await.unwrap();
    for kept in [&a, &y] {
        assert!(lake.store.head(&kept.key).await.unwrap().is_some(), "{}", kept.key);
    }
    // Deleting the tag on its own lineage works.
    lake.engine.delete_tag("t@b", "onb").await.unwrap();
    assert!(tags_of(&lake, "t@b").await.iter().all(|(_, t)| t.is_empty()));
}

/// A tag of the main line on a version number the branch also has (and a tag another client
/// made with Lance's `(branch, version)` reference) shows on its own lineage only; a restore on
/// the branch tags the branch's version, and its killed tag is reported on the branch.
#[tokio::test(flavor = "multi_thread")]
async fn tags_made_by_lance_and_restore_tags_belong_to_their_lineage() {
    let (lake, _) = lake_with_branch_tags().await;
    let ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    ds.tags().create("foreign-on-b", ("b", 1)).await.unwrap();
    ds.tags().create("foreign-on-main", ("main", 2)).await.unwrap();
    assert_eq!(tags_of(&lake, "t@b").await[0], (1, vec!["foreign-on-b".to_string()]));
    assert_eq!(tags_of(&lake, "t").await[1], (2, vec!["foreign-on-main".to_string()]));
    let killed = failpoint::scope("restore.after_tag", lake.engine.restore("t@b", 1)).await;
    assert!(killed.is_err());
    let on_branch = lake.engine.restore_tags("t@b", Utc::now()).await.unwrap();
    assert_eq!((on_branch.len(), on_branch[0].version, on_branch[0].table.as_str()), (1, 1, "t@b"));
    assert!(lake.engine.restore_tags("t", Utc::now()).await.unwrap().is_empty(), "not main's");
    let removed = lake.engine.remove_stale_restore_tags("t@b", Utc::now() + chrono::Duration::hours(2)).await.unwrap();
    assert_eq!(removed.len(), 1);
}

/// Turns on auto-cleanup (and more) in `table`'s config as another Lance client would.
async fn foreign_config(lake: &TestLake, table: &str, pairs: &[(&str, &str)]) {
    let mut ds = Dataset::open(&lake.engine.dataset_uri(table)).await.unwrap();
    ds.update_config(pairs.iter().map(|(k, v)| (*k, *v))).await.unwrap();
}

/// The input: another client's `UpdateConfig` turning on Lance's auto-cleanup
/// (`interval` 1, `older_than` 0s) was accepted as content-preserving and GC planned on. Its own
/// commit already runs the cleanup (version 1 goes), and the client's next commit removes
/// version 2, after which version 3 (journaled only by its transaction, proven against version
/// 2) can no longer be proven: GC was blocked with no advice, and for good once version 3 went
/// too. It is now a named lineage problem from its commit on, with the command that unsets it;
/// the recovery is that command, then `lake refs repair` of the version Lance left unproven. GC
/// is then complete (the object only the removed version 1 referenced is an orphan), and later
/// commits remove no version.
#[tokio::test(flavor = "multi_thread")]
async fn auto_cleanup_turned_on_by_another_client_is_named_until_unset() {
    let (lake, a) = lake_with_old_version().await;
    foreign_config(&lake, "t", &[("lance.auto_cleanup.interval", "1"), ("lance.auto_cleanup.older_than", "0s")]).await;
    assert!(!versions_of(&lake, "t").await.contains(&1), "the other client's own commit ran Lance's cleanup");
    let plan = dry_run(&lake, cutoff_now().await, 10).await;
    assert!(!plan.lineage_complete && plan.candidates.is_empty());
    let problem = plan
        .problems
        .iter()
        .find(|p| p.kind == "table_setting" && p.message.contains("lance.auto_cleanup.interval=1"))
        .expect("named");
    assert!(problem.message.contains("lance.auto_cleanup.older_than=0s"), "{problem}");
    assert!(
        problem
            .message
            .contains("`config unset` of `lance.auto_cleanup.interval`, `lance.auto_cleanup.older_than` on table `t`"),
        "{problem}"
    );
    assert!(problem.message.contains("delete_config_keys"), "{problem}");
    // The client commits again: Lance removes version 2, and version 3 loses its proof.
    foreign_config(&lake, "t", &[("other.key", "x")]).await;
    assert_eq!(versions_of(&lake, "t").await, vec![3, 4]);
    let plan = dry_run(&lake, cutoff_now().await, 10).await;
    assert!(
        plan.problems.iter().any(|p| p.kind == "missing_sidecar" && p.message.contains("version 3")),
        "{:?}",
        plan.problems
    );
    assert!(
        plan.problems.iter().any(|p| p.kind == "table_setting" && p.message.contains("lance.auto_cleanup.interval=1")),
        "{:?}",
        plan.problems
    );
    let unset = lake
        .engine
        .unset_config("t", &["lance.auto_cleanup.interval", "lance.auto_cleanup.older_than"])
        .await
        .unwrap()
        .expect("a version");
    assert_eq!(unset.version, 5);
    assert!(lake.engine.config("t").await.unwrap().keys().all(|k| !k.starts_with("lance.auto_cleanup.")));
    assert!(lake_lance::sidecar::read(&lake.store, "t", 4).await.unwrap().is_some(), "version 4 written down");
    let plan = dry_run(&lake, cutoff_now().await, 10).await;
    assert_eq!(plan.problems.len(), 1, "{:?}", plan.problems);
    assert!(
        plan.problems[0].kind == "missing_sidecar" && plan.problems[0].message.contains("version 3"),
        "{:?}",
        plan.problems
    );
    lake.engine.repair_refs("t", 3).await.unwrap();
    let plan = dry_run(&lake, cutoff_now().await, 10).await;
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    assert_eq!(candidates(&plan), BTreeSet::from([a.key.clone()]), "only the removed version 1 referenced a");
    // Later commits (Lance's own delete runs auto-cleanup when it is on) remove nothing.
    let b = lake.upload("b.bin", b"b").await;
    lake.engine.append("t", reader(vec![batch(&[("b", Some(&b))])])).await.unwrap();
    lake.engine.delete("t", "episode = 'b'").await.unwrap().unwrap();
    assert_eq!(versions_of(&lake, "t").await, vec![3, 4, 5, 6, 7]);
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
    let again = lake.engine.unset_config("t", &["lance.auto_cleanup.interval"]).await;
    assert!(matches!(again, Ok(None)), "{again:?}");
}

/// A dormant auto-cleanup (`interval` 1000, so the next cleanup is far off): the setting is
/// named at once, and unsetting it through the engine first writes down the entry of the other
/// client's version (implied by its transaction until then), so no version depends on a
/// transaction a later cleanup could remove.
#[tokio::test(flavor = "multi_thread")]
async fn unsetting_auto_cleanup_writes_implied_entries_down_first() {
    let (lake, _) = lake_with_old_version().await;
    foreign_config(&lake, "t", &[("lance.auto_cleanup.interval", "1000")]).await;
    assert_eq!(versions_of(&lake, "t").await, vec![1, 2, 3]);
    assert!(lake_lance::sidecar::read(&lake.store, "t", 3).await.unwrap().is_none(), "implied, not journaled");
    let plan = dry_run(&lake, cutoff_now().await, 10).await;
    assert_eq!(plan.problems.len(), 1, "{:?}", plan.problems);
    assert!(
        plan.problems[0].kind == "table_setting"
            && plan.problems[0].message.contains("table `t` version 3 sets `lance.auto_cleanup.interval=1000`"),
        "{:?}",
        plan.problems
    );
    lake.engine.unset_config("t", &["lance.auto_cleanup.interval"]).await.unwrap().expect("a version");
    assert!(lake_lance::sidecar::read(&lake.store, "t", 3).await.unwrap().is_some(), "written down first");
    assert!(dry_run(&lake, cutoff_now().await, 10).await.lineage_complete);
}

/// On a branch: `lance.auto_cleanup.retain_versions` (keep only N versions, however young) with
/// an interval on the branch's own config is the branch lineage's problem (`t@b`), and unset on
/// it; main stays complete meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn auto_cleanup_keeping_n_versions_on_a_branch_is_the_branchs_problem() {
    let (lake, _) = lake_with_branch_tags().await;
    foreign_config(&lake, "t@b", &[("lance.auto_cleanup.interval", "2"), ("lance.auto_cleanup.retain_versions", "1")])
        .await;
    let plan = dry_run(&lake, cutoff_now().await, 10).await;
    assert!(!plan.lineage_complete);
    let named: Vec<&lake_gc::plan::PlanProblem> = plan.problems.iter().filter(|p| p.kind == "table_setting").collect();
    assert_eq!(named.len(), 1, "{:?}", plan.problems);
    assert!(
        named[0].message.contains("table `t@b`") && named[0].message.contains("lance.auto_cleanup.retain_versions=1"),
        "{named:?}"
    );
    assert!(
        named[0].message.contains("`config unset` of `lance.auto_cleanup.interval`")
            && named[0].message.contains("on table `t@b`"),
        "{named:?}"
    );
    lake.engine
        .unset_config("t@b", &["lance.auto_cleanup.interval", "lance.auto_cleanup.retain_versions"])
        .await
        .unwrap();
    let plan = dry_run(&lake, cutoff_now().await, 10).await;
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    assert_eq!(versions_of(&lake, "t@b").await, vec![1, 2, 3, 4], "no version of the branch was removed");
}

/// A dormant setting (`older_than` without an interval) changes nothing and is no problem;
/// turning auto-cleanup on after a plan was made (with `referenced_branch`, which cascades it
/// into branches) makes that plan's apply stop before any delete, naming the setting.
#[tokio::test(flavor = "multi_thread")]
async fn auto_cleanup_turned_on_after_a_plan_stops_its_apply() {
    let (lake, _) = lake_with_old_version().await;
    let orphan = lake.upload("orphan.bin", b"never referenced").await;
    foreign_config(&lake, "t", &[("lance.auto_cleanup.older_than", "0s")]).await;
    let plan = dry_run(&lake, cutoff_now().await, 10).await;
    assert!(plan.lineage_complete, "a dormant setting is no problem: {:?}", plan.problems);
    assert_eq!(candidates(&plan), BTreeSet::from([orphan.key.clone()]));
    foreign_config(
        &lake,
        "t",
        &[("lance.auto_cleanup.interval", "0"), ("lance.auto_cleanup.referenced_branch", "true")],
    )
    .await;
    let refused = apply_fresh(&lake, &plan, &ApplyOptions::default()).await.unwrap_err().to_string();
    assert!(refused.contains("lance.auto_cleanup.interval=0"), "{refused}");
    assert!(refused.contains("lance.auto_cleanup.referenced_branch=true"), "{refused}");
    assert!(lake.store.head(&orphan.key).await.unwrap().is_some(), "nothing was deleted");
}

/// The data files of a write killed before its Lance commit (written, never committed: here
/// with `InsertBuilder::execute_uncommitted`, as the engine's first phase writes them) are
/// Lance's own garbage, under the table's `data/`, where GC never looks. Checked: `lake cleanup`
/// (Lance's cleanup, `delete_unverified` off) removes such a file once it is older than Lance's
/// unverified threshold of 7 days, whatever `--older-than` says, and leaves a younger one (it may
/// belong to a write still in flight).
#[tokio::test(flavor = "multi_thread")]
async fn uncommitted_data_files_of_a_killed_write_go_with_cleanup_after_seven_days() {
    let (lake, _) = lake_with_old_version().await;
    let data = lake.store.local_dir().unwrap().join("tables/t.lance/data");
    let files = || -> BTreeSet<String> {
        std::fs::read_dir(&data).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect()
    };
    let committed = files();
    let uri = lake.engine.dataset_uri("t");
    let write = |rows: &'static str| {
        let uri = uri.clone();
        async move {
            let params = lance::dataset::WriteParams { mode: lance::dataset::WriteMode::Append, ..Default::default() };
            lance::dataset::InsertBuilder::new(uri.as_str())
                .with_params(&params)
                .execute_uncommitted(vec![batch(&[(rows, None)])])
                .await
                .unwrap()
        }
    };
    write("killed long ago").await;
    let old: Vec<String> = files().difference(&committed).cloned().collect();
    write("killed just now").await;
    let young: Vec<String> = files().difference(&committed).filter(|f| !old.contains(f)).cloned().collect();
    assert!(!old.is_empty() && !young.is_empty());
    let eight_days_ago = std::time::SystemTime::now() - Duration::from_secs(8 * 86400);
    for f in &old {
        std::fs::File::options().write(true).open(data.join(f)).unwrap().set_modified(eight_days_ago).unwrap();
    }
    lake.engine.cleanup("t", Duration::from_secs(30 * 86400)).await.unwrap();
    let left = files();
    assert!(old.iter().all(|f| !left.contains(f)), "older than 7 days: removed");
    assert!(young.iter().all(|f| left.contains(f)), "younger: may be a write in flight, kept");
    assert!(committed.iter().all(|f| left.contains(f)), "committed data stays");
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
}

/// Found by the attack pass: `lake tag` accepted a user's tag named like a restore's
/// (`lake-restore-<ULID>`), which cleanup then removed as a killed restore's stale tag, and the
/// version it was meant to keep went with the next cleanup. Such names are refused, in any
/// letter case; nothing is tagged.
#[tokio::test(flavor = "multi_thread")]
async fn a_user_tag_cannot_take_a_restore_tags_name() {
    let (lake, _) = lake_with_old_version().await;
    let old = ulid::Ulid::from_parts(1, 7).to_string();
    for name in [
        format!("{RESTORE_TAG_PREFIX}{}", old.to_lowercase()),
        format!("{RESTORE_TAG_PREFIX}{old}"),
        format!("LAKE-RESTORE-{old}"),
        format!("{RESTORE_TAG_PREFIX}mine"),
    ] {
        let err = lake.engine.create_tag("t", 1, &name).await.unwrap_err();
        assert!(err.to_string().contains("reserved"), "{name}: {err}");
    }
    assert!(tags_of(&lake, "t").await.iter().all(|(_, tags)| tags.is_empty()), "nothing was tagged");
    lake.engine.create_tag("t", 1, "restore-point").await.unwrap();
}
