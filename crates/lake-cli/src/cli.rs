//! The command line: names and flags are the operator's contract.
//!
//! Size: clap derive definitions of 19 commands (4 with subcommands) and about 97 arguments,
//! whose doc comments (about 340 lines) are the `--help` text, `lake gc`'s 27 arguments alone
//! about 145 lines; one file so that the whole command-line contract reads in one place.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// lake: a data lake on Lance tables whose rows reference large immutable objects, with safe,
/// journal-driven garbage collection of orphan objects.
///
/// ROOT is a lake root: a local folder, file:///abs/path, or s3://bucket/prefix (configured by
/// the standard AWS_* environment variables). `lake <command> --help` explains each command.
///
/// A first session:
///
///   lake init ./lake --min-age 7d
///   lake ingest ./lake --table episodes ./recordings
///   lake delete ./lake --table episodes --where "episode = 'run-17'"
///   lake cleanup ./lake --table episodes --older-than 30d
///   lake gc ./lake --min-age 7d                       # dry run: what would be deleted
///   lake gc ./lake --min-age 7d --apply --checkpoint gc.ckpt
///   lake refs verify ./lake                           # journal vs full scans
///   lake get ./lake --table episodes --column file ./copy  # objects back, verified
#[derive(Debug, Parser)]
#[command(name = "lake", version, about, long_about, max_term_width = 100, verbatim_doc_comment)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create a lake at ROOT with its GC policy floor.
    Init(InitArgs),
    /// Upload every regular file under DIR as a managed object and append one row per file.
    ///
    /// Rows have the columns `episode` (the first path component below DIR, empty for files
    /// directly in DIR), `path` (the path relative to DIR) and `file` (a DataLocation:
    /// uri, sha256, size). All rows land in one new table version. Creates the table on first
    /// use.
    Ingest(IngestArgs),
    /// Upload every regular file under DIR and upsert one row per file keyed on --on columns.
    ///
    /// The rows are those of `lake ingest`. A file whose key (`--on path`, say) matches a row
    /// replaces it: the row's old object is no longer referenced by the new version (an orphan
    /// once older versions are cleaned up); other files are inserted. Creates the table on first
    /// use. One new version, journaled as a delta.
    Upsert(UpsertArgs),
    /// Delete the rows matching a Lance SQL predicate; their references are journaled as removed.
    Delete(DeleteArgs),
    /// Set columns of the rows matching a Lance SQL predicate (every row without --where).
    ///
    /// Each --set is COLUMN=EXPRESSION, a Lance SQL expression over the row before the update
    /// (`label='cat'`, `file=NULL`, `thumb=image`). Setting a reference column journals the
    /// references it removed and added; an object newly referenced must pass the publication
    /// guard. A concurrent write that conflicts makes the update fail with nothing committed.
    Update(UpdateArgs),
    /// Build, drop or list the indexes of a table (content-preserving versions: empty journal
    /// entries; an index built by another Lance client needs no repair either).
    #[command(subcommand)]
    Index(IndexCommand),
    /// Add a reference column from files, drop columns, rename a column (schema evolution:
    /// dropping a reference column removes its references, renaming keeps them).
    #[command(subcommand)]
    Columns(ColumnsCommand),
    /// Create, delete or list a table's branches. A branch `b` of table `t` is written to and read
    /// as table `t@b` by every other command; its retained versions keep their objects alive.
    #[command(subcommand)]
    Branch(BranchCommand),
    /// Restore an older version's content as a new latest version (journaled as a snapshot).
    Restore(RestoreArgs),
    /// Tag a version (tagged versions are retained: cleanup skips them and GC keeps their
    /// objects), or delete a tag with --delete.
    Tag(TagArgs),
    /// Check or rebuild the reference journal.
    #[command(subcommand)]
    Refs(RefsCommand),
    /// Compact a table's fragments (a content-preserving version with an empty journal entry).
    Compact(TableArgs),
    /// Remove table versions older than a duration (Lance version retention).
    ///
    /// Never removes the latest or tagged versions. Objects referenced only by removed versions
    /// become orphans that `lake gc` can collect.
    Cleanup(CleanupArgs),
    /// List the versions of a table that still exist, with the tags of that table (or branch
    /// `t@b`); a restore's temporary tag is marked, and `stale` when the restore was killed.
    Versions(VersionsArgs),
    /// Show a table's Lance config, or remove keys from it with --unset (a content-preserving
    /// version). Settings that let Lance remove versions on its own (`lance.auto_cleanup.*`)
    /// block GC until they are unset.
    Config(ConfigArgs),
    /// Write one object's bytes to standard output; verified when --sha256 and --size are given
    ///
    /// KEY_OR_URI is a key relative to the lake root (`objects/<ULID>/<name>`, as a row's `uri`
    /// holds it) or any URI naming an object of the lake (`file:///abs/root/objects/...`,
    /// `s3://bucket/prefix/objects/...`); on an s3:// root, also an object elsewhere in the root's
    /// bucket. Anything else is refused (error kind `object_unreachable`): lake reads with the
    /// lake's own store and settings only.
    ///
    /// With --sha256 HEX and --size BYTES (a reference's, from a row's DataLocation), the bytes
    /// are counted and hashed as they are read and compared with them; a difference fails with
    /// `object_mismatch` and exit 1. An object of up to 64 MiB is held in memory until it is
    /// verified, so a mismatch writes nothing; a larger one is streamed as it is read (64 MiB held
    /// at first), and on a mismatch the bytes already written cannot be taken back: when writing
    /// a large object to a file, check the exit code (`lake cat ... > f || rm f`), or use
    /// `lake get`, which never leaves an unverified file. Without --sha256 and --size the read is
    /// NOT verified (the bytes the store holds now, read in 8 MiB ranges), and a line on
    /// standard error says so, with the size and SHA-256 of what was written.
    ///
    /// A missing object fails with `object_missing`. With --json, standard output still carries
    /// the bytes; one line on standard error reports `{"uri", "key", "size", "sha256",
    /// "verified"}` (key: null for an object outside the lake root), or the error.
    ///
    ///   lake cat ./lake objects/01J9.../run-1.log --sha256 9f86d0... --size 1532 > run-1.log
    #[command(verbatim_doc_comment)]
    Cat(CatArgs),
    /// Read back, verified, every object the chosen rows of a table reference, into folder DIR
    ///
    /// For every row of the table's latest version that matches --where (every row without it),
    /// every non-null reference in --column (a DataLocation column, or a list of them) is read,
    /// checked against the reference's size and SHA-256, and written to DIR/<key> for an object
    /// of the lake (keys are `objects/<ULID>/<name>`, so DIR mirrors the lake's `objects/`) or to
    /// DIR/external/<sha256 hex> for an object outside the lake root. An object referenced by
    /// several rows is read once; --concurrency objects are read at a time, each read whole and
    /// written in one write up to 8 MiB, streamed to its file above (memory: one batch of rows,
    /// the identities of the objects, and at most --concurrency objects of up to 8 MiB).
    ///
    /// DIR must lie outside the lake, by any path or link (as every file lake writes), and is
    /// created if its parent exists. Each file is written atomically: a temporary file in its
    /// folder, renamed into place once every byte is verified, so a file in DIR is always a whole,
    /// verified object. An existing file is never replaced: one with the object's size and SHA-256
    /// is skipped (`skipped_existing`: run the command again after an interruption and it
    /// resumes), any other stops the command naming it (kind `refused`). A missing or mismatched
    /// object, or one the lake's store cannot reach, stops the command (kinds `object_missing`,
    /// `object_mismatch`, `object_unreachable`; exit 1); the files already written stay.
    ///
    /// --json prints {"rows", "objects", "bytes", "written", "skipped_existing", "files": [{"uri",
    /// "path", "size"}, ...]}: rows matched, distinct objects, their bytes, files written, files
    /// already there, and every object's file (sorted by path).
    ///
    ///   lake get ./lake --table episodes --where "episode = 'run-17'" --column file ./run-17
    #[command(verbatim_doc_comment)]
    Get(GetArgs),
    /// Plan (dry run) or apply the garbage collection of orphan managed objects.
    ///
    /// Without --apply, prints the plan and deletes nothing (and writes nothing inside the lake:
    /// --out, --metrics-file and checkpoints must lie outside it, by any path or link). With
    /// --apply and --checkpoint PATH, persists the plan beside PATH (PATH.plan.json),
    /// revalidates it against the journal, and deletes page by page, recording progress in PATH
    /// after every group of pages. If PATH records an unfinished apply, the same command resumes
    /// it (no new plan is made); if it records a finished one (yesterday's run at a fixed path),
    /// a new plan is made and replaces it. --plan FILE applies a saved plan the same way; it is
    /// refused while PATH records an unfinished apply of another plan (both plans are named).
    ///
    /// Incremental plans: a complete apply records a GC state under the root, and the next plan
    /// starts from it, listing only the keys minted since that run (and looking up the keys
    /// released since): `mode: incremental` and the state's digest in the report. A plan is full
    /// (`mode: full` and why) with --full, when no state is recorded yet, at least every
    /// --full-every (7d), when a `lake cleanup` since the state removed versions
    /// (what they referenced is no longer in the journal's replay), and when the state cannot be
    /// trusted (corrupt, edited, of another lake, naming journal positions gone). A sharded plan
    /// (--shards) with a usable state is one incremental shard over every key. Either mode
    /// deletes only what a full plan at the same cutoff would; an incremental one may leave
    /// some for the next full plan.
    ///
    /// Sharded plans (for large lakes, or to spread the deletes over processes): `lake gc ROOT
    /// --min-age D --shards N --out DIR` writes a manifest and N shard plans over disjoint key
    /// ranges; `lake gc ROOT --min-age D --apply --manifest DIR/manifest.json --checkpoint-dir
    /// CKDIR [--shard I]` applies every shard (or shard I), each revalidated and checkpointed on
    /// its own (CKDIR/shard-0000I.ckpt); a killed shard resumes from its checkpoint. An edited
    /// manifest or shard plan, or a shard of another manifest, is refused.
    ///
    /// Exit codes: 0 done; 1 refused or failed (nothing, or only what PATH records, was
    /// deleted); 3 dry run on incomplete lineage (see `problems`); 4 apply stopped with work
    /// left (failed deletes, --max-pages, or a version committed since the plan whose journal
    /// entry a running writer has not written yet): run the same command again to resume.
    Gc(Box<GcArgs>),
    /// Run the main job end to end on a fresh local lake and check the result.
    ///
    /// Ingests real files (default: this repository's tracked files) in two versions, deletes
    /// some episodes, compacts, cleans up old versions, leaves an upload that was never appended
    /// and a young one, dry-runs GC, applies it, and then checks that every object any retained
    /// version references still exists with its recorded SHA-256 and size.
    Demo(DemoArgs),
}

#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// Lake root.
    pub root: String,
    /// GC policy floor: the smallest --min-age `lake gc` accepts without --allow-below-policy
    /// (humantime: 7d, 90m, 1s).
    #[arg(long, value_name = "DUR", default_value = "7d")]
    pub min_age: String,
}

#[derive(Debug, Args)]
pub(crate) struct TableArgs {
    /// Lake root.
    pub root: String,
    /// Table name (1-64 of A-Z a-z 0-9 _ -).
    #[arg(long)]
    pub table: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct IngestArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// Folder whose regular files (recursively) are ingested.
    pub dir: PathBuf,
    /// Replace the table's content instead of appending (journaled as a snapshot).
    #[arg(long)]
    pub overwrite: bool,
}

#[derive(Debug, Args)]
pub(crate) struct UpsertArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// Key column (repeatable): `episode`, `path`.
    #[arg(long, required = true, value_name = "COLUMN")]
    pub on: Vec<String>,
    /// Folder whose regular files (recursively) are upserted.
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct RestoreArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// The version whose content becomes the new latest version.
    #[arg(long)]
    pub version: u64,
}

#[derive(Debug, Args)]
pub(crate) struct TagArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// The version to tag (not with --delete).
    #[arg(long, required_unless_present = "delete")]
    pub version: Option<u64>,
    /// Delete the tag instead of creating it.
    #[arg(long, conflicts_with = "version")]
    pub delete: bool,
    /// Tag name.
    pub tag: String,
}

#[derive(Debug, Subcommand)]
pub(crate) enum RefsCommand {
    /// Scan every retained version's reference columns and compare with the journal; check
    /// every referenced object exists with its size. Exits 1 on any difference.
    ///
    /// Runs in bounded memory (--memory-budget-mib): the journal's counts and the scans' counts
    /// are sorted by identity and version, spilling to the temporary folder (`TMPDIR`), and
    /// merged. The report lists at most the first 1000 count differences, missing objects and
    /// size differences each, with the exact total of each.
    Verify(VerifyArgs),
    /// Rebuild a version's missing journal entry as a snapshot from a scan of that version
    /// (for versions written around the engine, or by a writer that crashed after committing).
    ///
    /// Refused for a version whose columns lake cannot read with certainty (a DataLocation
    /// look-alike, a nested DataLocation, a Lance blob column) or that reads files outside its
    /// dataset folder. Repair has no publication guard: do not run it while a GC apply runs (a
    /// version it journals during one group of deletes is seen only before the next group).
    ///
    /// Runs in bounded memory (--memory-budget-mib) whatever the version's size: the scanned
    /// references are sorted in runs spilled to `TMPDIR`, counted per object and streamed into
    /// the entry's sorted reference log.
    Repair(RepairArgs),
    /// Bind the journal entries of retained versions to the Lance versions they describe, after
    /// checking the journal against full scans (for a lake written by an earlier build, whose
    /// entries record nothing of their versions, or a table whose Lance files were replaced
    /// under its journal).
    ///
    /// Per table: every retained version is scanned and compared with the journal, as `verify`
    /// does; only when every count matches and the table has no other lineage problem are the
    /// unbound entries rewritten, same content, with their version's transaction UUID and
    /// manifest identity. Otherwise nothing of the table is rewritten and the command exits 1
    /// naming the differences. A plan made before must be made again.
    Bind(VerifyArgs),
    /// Resolve write intents: writes killed, suspended or reported as failed whose version may
    /// still land (their objects are kept from GC meanwhile). For each intent, once its
    /// deadline has passed by the store's clock (waited for, announced on standard error; or
    /// reported pending with --no-wait): revoke it (its writer publishes nothing from then on),
    /// commit a fence version (a content-preserving config change; an empty version 1 for a
    /// create that never landed), journal every version up to the fence that has no journal
    /// entry from its two manifests, then remove the intent: "committed as version N" when a
    /// version carries its write, else "not committed". Then journals, from its two manifests,
    /// every version without a journal entry that this lake committed (its marker, or an
    /// intent naming it), when the references it adds pass the publication guard at the time
    /// its manifest was written or an intent protects them; any other such version is left for
    /// `lake refs repair`. Exits 1 when an intent stays pending or a version is left (the
    /// report says why). docs/protocol.md states the protocol.
    Recover(RecoverArgs),
}

#[derive(Debug, Args)]
pub(crate) struct RecoverArgs {
    /// Lake root.
    pub root: String,
    /// Only this table's intents (`t`, or `t@b` for a branch).
    #[arg(long)]
    pub table: Option<String>,
    /// Do not wait for a write whose deadline has not passed (its writer may still be running):
    /// report it as pending and exit 1. Without it, each such wait is announced on standard
    /// error with the time it ends (the store's clock, UTC).
    #[arg(long)]
    pub no_wait: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// Lake root.
    pub root: String,
    /// Only this table (default: every registered table).
    #[arg(long)]
    pub table: Option<String>,
    /// Memory for verification's sorted-run buffers, in MiB (1 to 1048576): a third each holds
    /// the journal's counts of the table being verified, its scanned counts, and the referenced
    /// objects still to check; past it they spill to the temporary folder (`TMPDIR`), so
    /// verification's memory does not grow with the lake.
    #[arg(long, value_name = "MIB", default_value_t = lake::engine::budget::DEFAULT_MEMORY_BUDGET / (1024 * 1024))]
    pub memory_budget_mib: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RepairArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// The version whose journal entry is rebuilt.
    #[arg(long)]
    pub version: u64,
    /// Memory for the scan's sorted runs, in MiB (1 to 1048576): past it the scanned
    /// references spill to the temporary folder (`TMPDIR`), and the entry is streamed into a
    /// sorted reference log, so repair's memory does not grow with the version.
    #[arg(long, value_name = "MIB", default_value_t = lake::engine::budget::DEFAULT_MEMORY_BUDGET / (1024 * 1024))]
    pub memory_budget_mib: usize,
}

#[derive(Debug, Args)]
pub(crate) struct DeleteArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// Lance SQL filter selecting the rows to delete, e.g. "episode = 'Asia'".
    #[arg(long = "where", value_name = "PREDICATE")]
    pub predicate: String,
}

#[derive(Debug, Args)]
pub(crate) struct UpdateArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// COLUMN=EXPRESSION (repeatable), e.g. --set "label='cat'" --set "file=NULL".
    #[arg(long = "set", value_name = "COLUMN=EXPR", required = true)]
    pub assignments: Vec<String>,
    /// Lance SQL filter selecting the rows to update, e.g. "episode = 'Asia'".
    #[arg(long = "where", value_name = "PREDICATE")]
    pub predicate: Option<String>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ColumnsCommand {
    /// Upload every regular file under DIR and add it, as a new reference column NAME, to the
    /// row whose `path` is the file's path below DIR (a table made by `lake ingest`); rows
    /// without a file get a null.
    AddFiles(AddFilesArgs),
    /// Drop columns (a reference column's objects lose those references).
    Drop(DropColumnsArgs),
    /// Rename a column (a reference column keeps its references).
    Rename(RenameColumnArgs),
}

#[derive(Debug, Args)]
pub(crate) struct AddFilesArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// The new column's name.
    #[arg(long)]
    pub name: String,
    /// Folder whose files are matched to rows by path.
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct DropColumnsArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// A column to drop (repeatable).
    #[arg(long = "column", required = true)]
    pub columns: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct RenameColumnArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// The column's name now.
    #[arg(long)]
    pub from: String,
    /// Its new name.
    #[arg(long)]
    pub to: String,
}

#[derive(Debug, Subcommand)]
pub(crate) enum BranchCommand {
    /// Create branch NAME of a table from a version or tag of its main line.
    Create(BranchCreateArgs),
    /// Delete branch NAME (objects only its versions referenced become orphans).
    Delete(BranchNameArgs),
    /// List the branches lake journals.
    List(TableArgs),
}

#[derive(Debug, Args)]
pub(crate) struct BranchCreateArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// The branch's name (1-64 of A-Z a-z 0-9 _ -).
    #[arg(long)]
    pub name: String,
    /// A version number or a tag of the main line.
    #[arg(long, value_name = "VERSION|TAG")]
    pub from: String,
}

#[derive(Debug, Args)]
pub(crate) struct BranchNameArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// The branch's name.
    #[arg(long)]
    pub name: String,
}

#[derive(Debug, Subcommand)]
pub(crate) enum IndexCommand {
    /// Build an index on one column (Lance's default parameters for its kind).
    Create(IndexCreateArgs),
    /// Remove an index by name.
    Drop(IndexDropArgs),
    /// List a table's indexes.
    List(TableArgs),
}

#[derive(Debug, Args)]
pub(crate) struct IndexCreateArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// The column to index.
    #[arg(long)]
    pub column: String,
    /// btree, bitmap, label_list, ngram, zonemap, bloomfilter or inverted (full-text search).
    #[arg(long, default_value = "btree")]
    pub kind: String,
    /// The index's name (default: Lance's `<column>_idx`).
    #[arg(long)]
    pub name: Option<String>,
    /// Replace an index of the same name.
    #[arg(long)]
    pub replace: bool,
}

#[derive(Debug, Args)]
pub(crate) struct IndexDropArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// The index's name (`lake index list` shows them).
    #[arg(long)]
    pub name: String,
}

#[derive(Debug, Args)]
pub(crate) struct CleanupArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// Remove versions older than this (humantime: 30d, 12h, 0s).
    #[arg(long, value_name = "DUR")]
    pub older_than: String,
}

#[derive(Debug, Args)]
pub(crate) struct VersionsArgs {
    #[command(flatten)]
    pub table: TableArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ConfigArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// A config key to remove (repeatable), e.g. `lance.auto_cleanup.interval`.
    #[arg(long, value_name = "KEY")]
    pub unset: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct CatArgs {
    /// Lake root.
    pub root: String,
    /// The object: a key relative to the lake root (`objects/<ULID>/<name>`) or a URI of it.
    #[arg(value_name = "KEY_OR_URI")]
    pub key_or_uri: String,
    /// The SHA-256 the reference records (64 hex characters); verifies the read, with --size.
    #[arg(long, value_name = "HEX")]
    pub sha256: Option<String>,
    /// The size in bytes the reference records; verifies the read, with --sha256.
    #[arg(long, value_name = "BYTES")]
    pub size: Option<u64>,
    /// Report on standard error as one JSON object instead of text (the bytes still go to
    /// standard output).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct GetArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// Lance SQL filter selecting the rows, e.g. "episode = 'Asia'" (default: every row).
    #[arg(long = "where", value_name = "PREDICATE")]
    pub predicate: Option<String>,
    /// The reference column whose objects are read (a DataLocation or a list of them).
    #[arg(long, value_name = "COLUMN")]
    pub column: String,
    /// Folder the objects are written into (a path or file:///abs/path, outside the lake;
    /// created if its parent exists).
    #[arg(value_name = "DIR")]
    pub dir: String,
    /// Objects read and written at once (1-64).
    #[arg(long, value_name = "N", default_value_t = crate::commands::objects::DEFAULT_GET_CONCURRENCY)]
    pub concurrency: usize,
}

#[derive(Debug, Args)]
pub(crate) struct GcArgs {
    /// Lake root.
    pub root: String,
    /// Only objects older than this are candidates (humantime: 7d, 90m). Required; must be
    /// positive and at least the lake's policy floor.
    #[arg(long, value_name = "DUR")]
    pub min_age: Option<String>,
    /// Delete the planned objects (requires --checkpoint). The report counts `deleted` (removed
    /// by this apply: a local removal; on S3 a key DeleteObjects confirmed removed, exactly where
    /// the store honours conditional deletes as Amazon S3 does, else on the key's first request:
    /// the plan listed it, so it existed), `already gone` (known absent before its delete),
    /// `gone` (S3 `absent`: confirmed gone by a request that may repeat an earlier one of this
    /// apply, a retry or the first group after a resume), `failed` (the store did not delete it:
    /// on S3 only the keys DeleteObjects answered with an error; retried by the next run).
    #[arg(long)]
    pub apply: bool,
    /// Where the apply's progress is recorded (a local file, file:///abs/path, or
    /// s3://bucket/key; outside the lake), with its plan beside it at PATH.plan.json. An
    /// unfinished apply recorded there is resumed; a finished one is replaced by a new plan.
    #[arg(long, value_name = "PATH")]
    pub checkpoint: Option<String>,
    /// Accept a --min-age below the lake's policy floor.
    #[arg(long)]
    pub allow_below_policy: bool,
    /// Plan at this cutoff (RFC 3339 UTC) instead of now - min-age; must not be later than
    /// that. Two dry runs of the same lake state at the same cutoff give identical plans.
    #[arg(long, value_name = "RFC3339")]
    pub cutoff: Option<String>,
    /// Make a full plan: list every managed key, whatever the GC state says. Without it a plan
    /// is incremental when the GC state the last complete apply recorded (under
    /// `_lake/gc/state/`) can be trusted: it lists only the keys minted since that run's cutoff
    /// minus a margin of 1h, and looks up one by one the keys deleted rows, cleanups and that
    /// run's leftovers released since. Every key either plan looks at passes the same checks, so
    /// an incremental plan never adds a candidate; it can miss an upload that took longer than
    /// --min-age plus the margin, and keys written by hand under objects/, which the next full
    /// plan collects. The report says `mode: incremental` (and the state it started from) or
    /// `mode: full` and why. With --shards and a usable state, the plan is one incremental shard.
    #[arg(long, conflicts_with_all = ["plan", "manifest"])]
    pub full: bool,
    /// Make a full plan anyway when the last full plan behind the GC state has a cutoff at least
    /// this much older than this run's (humantime, 1s to 365d): incremental runs stay bounded by
    /// a full one at this interval, which collects what they can miss.
    #[arg(long, value_name = "DUR", default_value = "7d")]
    pub full_every: String,
    /// Write the plan document (with its digest) to FILE (a local path or file:///abs/path,
    /// outside the lake). An existing FILE is replaced only if it is empty or a plan document
    /// (--force: any regular file), atomically. With --shards, FILE is a folder (created if its
    /// parent exists) that receives manifest.json and one plan document per shard; an existing
    /// folder must be empty or hold a sharded plan (--force: anything).
    #[arg(long, value_name = "FILE")]
    pub out: Option<String>,
    /// Apply the plan saved in FILE by an earlier dry run (`--out FILE`) instead of planning
    /// again; its digest is checked, and apply still revalidates it against the journal.
    /// Refused while --checkpoint records an unfinished apply of another plan.
    #[arg(long, value_name = "FILE", requires = "apply")]
    pub plan: Option<PathBuf>,
    /// Also write the run's metrics to FILE in the Prometheus text format (outside the lake; an
    /// existing FILE is replaced only if it is empty or a lake metrics file, --force: any
    /// regular file, atomically).
    #[arg(long, value_name = "FILE")]
    pub metrics_file: Option<String>,
    /// Let --out and --metrics-file replace an existing regular file, and --shards N --out DIR
    /// write into a folder, that is not a document of the same kind. Never inside the lake.
    #[arg(long)]
    pub force: bool,
    /// Memory for planning's sorted-run buffers, in MiB (1 to 1048576): half holds the journal
    /// of the table being replayed, half the live keys (and then the candidate list); past it
    /// they spill to the temporary folder (`TMPDIR`), so planning's memory does not grow with
    /// the lake.
    #[arg(long, value_name = "MIB", default_value_t = lake::engine::budget::DEFAULT_MEMORY_BUDGET / (1024 * 1024))]
    pub memory_budget_mib: usize,
    /// Refuse to run when this host's clock differs from the store's by more than this, 1s to
    /// 1d (GC judges age by the store's clock; a large difference means something is wrong).
    #[arg(long, value_name = "DUR", default_value = "5m")]
    pub max_clock_skew: String,
    /// Keys per delete request (1-1000).
    #[arg(long, default_value_t = 1000)]
    pub page_size: usize,
    /// Delete requests in flight at once (1-64).
    #[arg(long, default_value_t = lake::collect::apply::DEFAULT_CONCURRENCY)]
    pub delete_concurrency: usize,
    /// Stop the apply after this many delete pages, at least 1 (resume later with the same
    /// command).
    #[arg(long)]
    pub max_pages: Option<u64>,
    /// Objects per inventory listing page (1-1000, S3's ListObjectsV2 limit).
    #[arg(long, default_value_t = 1000)]
    pub list_page_size: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Dry run only: make the plan as N shards (1-256) over disjoint ranges of keys, split by
    /// the objects' minting time, each shard with its own candidate list and digest, under one
    /// manifest whose digest covers the shards' digests. One cutoff for all; one read of the
    /// journal and one listing. With a usable GC state (as for an unsharded run: --full and
    /// --full-every apply), the plan is instead one incremental shard over every key (it lists
    /// only the keys minted since the state, the work shards split), whose complete apply
    /// records the next state; the report says `mode:`. With --out DIR, writes
    /// DIR/manifest.json and DIR/shard-00000.json
    /// ... (DIR is created if its parent exists). The shards' candidates together are exactly
    /// an unsharded plan's at that cutoff.
    #[arg(long, value_name = "N", conflicts_with_all = ["apply", "plan", "checkpoint"])]
    pub shards: Option<usize>,
    /// Apply the sharded plan whose manifest is FILE (DIR/manifest.json; the shard plans are read
    /// from beside it and each is checked against the manifest's digests). Every shard is
    /// revalidated and applied on its own, one after another, each with its own checkpoint in
    /// --checkpoint-dir; rerun the same command to resume. Needs --apply and --checkpoint-dir.
    #[arg(long, value_name = "FILE", requires_all = ["apply", "checkpoint_dir"], conflicts_with_all = ["plan", "checkpoint", "out", "cutoff"])]
    pub manifest: Option<PathBuf>,
    /// Folder of the shards' checkpoints (outside the lake; a local folder that exists, or
    /// s3://bucket/prefix): shard I's progress is CKDIR/shard-0000I.ckpt, its plan beside it
    /// (.plan.json). An unfinished shard apply there is resumed; a finished one of an earlier
    /// sharded plan is replaced. Every shard document is checked against the manifest before
    /// the first delete.
    #[arg(long, value_name = "CKDIR", requires = "manifest")]
    pub checkpoint_dir: Option<String>,
    /// With --manifest: apply only shard I (0-based), e.g. one shard per process or machine;
    /// shards are independent and may run at the same time. Default: every shard.
    #[arg(long, value_name = "I", requires = "manifest")]
    pub shard: Option<u64>,
    /// Plan from this S3 Inventory report instead of listing every object: the URL of its
    /// manifest (s3://bucket/.../manifest.json; any bucket the AWS_* configuration can read).
    /// The report is refused (nothing planned) unless its checksums, bucket, format, fields and
    /// age check out and it lists the lake; keys minted after its creation time minus
    /// --inventory-margin are listed live. CSV and Parquet reports. Only full plans read it: an
    /// incremental plan (a GC state there) lists the few keys minted since the state itself.
    #[arg(long, value_name = "MANIFEST_URL")]
    pub inventory: Option<String>,
    /// Refuse an --inventory report older than this by the store's clock, 1s to 365d (a weekly
    /// report plus AWS's 48 h delivery delay).
    #[arg(long, value_name = "DUR", default_value = "9d")]
    pub inventory_max_age: String,
    /// Read from an --inventory report only the keys minted this long before its creation time,
    /// 0s to 365d; later ones are listed live (AWS's reports are eventually consistent
    /// snapshots).
    #[arg(long, value_name = "DUR", default_value = "48h")]
    pub inventory_margin: String,
    /// Listing requests in flight on an S3 root: `objects/` is listed as ranges of mint time,
    /// concurrently, in key order, each range buffering a bounded number of pages (the plan is
    /// the same whatever N, 1 to 64); 1 lists one page at a time. A local root is listed by one
    /// walk.
    #[arg(long, value_name = "N", default_value_t = lake::collect::collector::DEFAULT_LIST_STREAMS)]
    pub list_streams: usize,
}

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Folder for the demo (a lake is created in DIR/lake); default: a new temporary folder.
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Files to ingest; default: this repository's tracked files.
    #[arg(long, value_name = "DIR")]
    pub from: Option<PathBuf>,
}

impl Command {
    /// Whether the command was asked for JSON (`--json`): its failure is then printed as one
    /// JSON object too (`main`).
    pub(crate) fn json_output(&self) -> bool {
        match self {
            Command::Gc(a) => a.json,
            Command::Compact(a) => a.json,
            Command::Cat(a) => a.json,
            Command::Get(a) => a.table.json,
            Command::Refs(RefsCommand::Verify(a) | RefsCommand::Bind(a)) => a.json,
            Command::Refs(RefsCommand::Recover(a)) => a.json,
            Command::Branch(BranchCommand::List(a)) => a.json,
            Command::Index(IndexCommand::List(a)) => a.json,
            _ => self.table_args().is_some_and(|t| t.json),
        }
    }

    /// The table arguments (root, `--table`, `--json`) of a command that takes them.
    fn table_args(&self) -> Option<&TableArgs> {
        Some(match self {
            Command::Ingest(a) => &a.table,
            Command::Upsert(a) => &a.table,
            Command::Delete(a) => &a.table,
            Command::Update(a) => &a.table,
            Command::Restore(a) => &a.table,
            Command::Tag(a) => &a.table,
            Command::Cleanup(a) => &a.table,
            Command::Versions(a) => &a.table,
            Command::Config(a) => &a.table,
            Command::Refs(RefsCommand::Repair(a)) => &a.table,
            Command::Columns(ColumnsCommand::AddFiles(a)) => &a.table,
            Command::Columns(ColumnsCommand::Drop(a)) => &a.table,
            Command::Columns(ColumnsCommand::Rename(a)) => &a.table,
            Command::Branch(BranchCommand::Create(a)) => &a.table,
            Command::Branch(BranchCommand::Delete(a)) => &a.table,
            Command::Index(IndexCommand::Create(a)) => &a.table,
            Command::Index(IndexCommand::Drop(a)) => &a.table,
            _ => return None,
        })
    }

    /// Whether the command does its work under `--memory-budget-mib` (GC, `refs verify`,
    /// `refs repair`): it runs with glibc's arenas limited to one per core
    /// (`lake::engine::allocator`). Writes keep glibc's default: their journal worker allocates
    /// beside Lance's encoder, and 2 arenas cost `append_throughput_ratio` 0.83 -> 0.72.
    pub(crate) fn runs_under_memory_budget(&self) -> bool {
        matches!(self, Command::Gc(_) | Command::Refs(RefsCommand::Verify(_) | RefsCommand::Repair(_)))
    }
}
