//! Sharded plans through the binary: `--shards N --out DIR` writes a manifest and N shard plans
//! whose candidates are the unsharded plan's; edited documents are refused; `--apply --manifest
//! --checkpoint-dir` applies one shard (interrupted, then resumed) and then every shard.

use crate::{json, lake, object_files, ok, stderr, stdout, write_files};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

fn candidate_uris(document: &serde_json::Value) -> Vec<String> {
    let list = document["plan"]["candidates"].as_array().unwrap();
    list.iter().map(|c| c["uri"].as_str().unwrap().to_string()).collect()
}

#[test]
fn sharded_plans_are_written_refused_when_edited_and_applied_shard_by_shard() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("lake").display().to_string();
    let src = dir.path().join("in");
    let files: Vec<(String, String)> =
        (0..8).map(|i| (format!("{}/f{i}.bin", if i < 5 { "gone" } else { "kept" }), format!("file {i}"))).collect();
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    write_files(&src, &refs);
    ok(&["init", &root, "--min-age", "4s"]);
    ok(&["ingest", &root, "--table", "t", src.to_str().unwrap()]);
    ok(&["delete", &root, "--table", "t", "--where", "episode = 'gone'"]);
    ok(&["cleanup", &root, "--table", "t", "--older-than", "0s"]);
    crate::advance_clock(Duration::from_millis(4200));

    let whole = json(&ok(&["gc", &root, "--min-age", "4s", "--json"]));
    assert_eq!(whole["candidate_count"], 5, "{whole}");
    let cutoff = whole["cutoff"].as_str().unwrap().to_string();
    let out = dir.path().join("plan");
    let outs = out.to_str().unwrap();
    let sharded =
        json(&ok(&["gc", &root, "--min-age", "4s", "--cutoff", &cutoff, "--shards", "3", "--out", outs, "--json"]));
    assert_eq!((sharded["shard_count"].as_u64(), sharded["lineage_complete"].as_bool()), (Some(3), Some(true)));
    assert_eq!(sharded["candidate_count"], whole["candidate_count"]);
    assert_eq!(sharded["cutoff"], whole["cutoff"]);
    let shards = sharded["shards"].as_array().unwrap();
    let mut union = Vec::new();
    for (i, shard) in shards.iter().enumerate() {
        let document = json(&std::fs::read_to_string(out.join(format!("shard-{i:05}.json"))).unwrap());
        assert_eq!(document["digest"], shard["digest"]);
        assert_eq!(document["plan"]["shard"]["index"], i);
        assert_eq!(candidate_uris(&document).len() as u64, shard["candidate_count"].as_u64().unwrap());
        union.extend(candidate_uris(&document));
    }
    let planned: Vec<String> =
        whole["candidates"].as_array().unwrap().iter().map(|c| c["uri"].as_str().unwrap().to_string()).collect();
    assert_eq!(union, planned, "the shards' candidates, in order, are the unsharded plan's");
    let text = ok(&["gc", &root, "--min-age", "4s", "--cutoff", &cutoff, "--shards", "3", "--out", outs]);
    assert!(text.contains("3 shards") && text.contains("--apply --manifest"), "{text}");
    assert_eq!(
        json(&std::fs::read_to_string(out.join("manifest.json")).unwrap())["digest"],
        sharded["manifest_digest"]
    );

    let manifest = out.join("manifest.json");
    let manifest_s = manifest.to_str().unwrap();
    let ckdir = dir.path().join("ck");
    std::fs::create_dir(&ckdir).unwrap();
    let ckdir_s = ckdir.to_str().unwrap();
    let before = object_files(Path::new(&root));
    let apply = |extra: &[&str]| {
        let args = [
            &[
                "gc",
                &root,
                "--min-age",
                "4s",
                "--apply",
                "--manifest",
                manifest_s,
                "--checkpoint-dir",
                ckdir_s,
                "--json",
            ][..],
            extra,
        ]
        .concat();
        lake(&args)
    };
    // An edited manifest, or an edited shard plan, is refused; nothing is deleted.
    let original = std::fs::read_to_string(&manifest).unwrap();
    let digest = shards[0]["digest"].as_str().unwrap();
    std::fs::write(&manifest, original.replace(digest, &"0".repeat(64))).unwrap();
    let o = apply(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains("digest mismatch"), "{}", stderr(&o));
    std::fs::write(&manifest, &original).unwrap();
    let busiest = (0..3).max_by_key(|i| shards[*i]["candidate_count"].as_u64().unwrap()).unwrap();
    let shard_doc = out.join(format!("shard-{busiest:05}.json"));
    let original_shard = std::fs::read_to_string(&shard_doc).unwrap();
    std::fs::write(&shard_doc, original_shard.replacen("\"size\": ", "\"size\": 1", 1)).unwrap();
    let o = apply(&["--shard", &busiest.to_string()]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains("digest mismatch"), "{}", stderr(&o));
    std::fs::write(&shard_doc, &original_shard).unwrap();
    assert_eq!(object_files(Path::new(&root)), before, "nothing deleted by a refusal");
    assert!(lake(&[
        "gc",
        &root,
        "--min-age",
        "4s",
        "--apply",
        "--plan",
        shard_doc.to_str().unwrap(),
        "--checkpoint",
        ckdir.join("x").to_str().unwrap()
    ])
    .status
    .code()
    .is_some_and(|c| c == 1));

    // One shard, stopped after one page (exit 4), then resumed by every shard's apply.
    let busiest_s = busiest.to_string();
    let o = apply(&["--shard", &busiest_s, "--page-size", "1", "--max-pages", "1"]);
    assert_eq!(o.status.code(), Some(4), "{}{}", stdout(&o), stderr(&o));
    let first = json(&stdout(&o));
    assert_eq!(first["shards"][busiest]["deleted"], 1, "{first}");
    assert!(ckdir.join(format!("shard-{busiest:05}.ckpt")).is_file());
    let all = json(&stdout(&apply(&[])));
    assert_eq!(all["complete"], true, "{all}");
    assert_eq!(all["shards"][busiest]["resumed"], true);
    let after = object_files(Path::new(&root));
    let gone: BTreeSet<String> = before.iter().filter(|k| !after.contains(k)).cloned().collect();
    assert_eq!(gone, planned.into_iter().collect(), "every shard applied: exactly the unsharded plan deleted");
    let again = apply(&[]);
    assert!(again.status.success(), "{}", stderr(&again));
    let again = json(&stdout(&again));
    assert!(again["shards"].as_array().unwrap().iter().all(|s| s["already_complete"] == true), "{again}");
    let help = ok(&["gc", "--help"]);
    assert!(help.contains("--shards") && help.contains("--manifest") && help.contains("--checkpoint-dir"), "{help}");
}
